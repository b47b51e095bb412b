package lincheck

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// processor is the fake payment processor of the effects runs, in the test
// process, reached by the service over HTTP on loopback. It honours
// Idempotency-Key: the first call with a key charges, and every later call
// with it is answered with that charge. It records every call and every
// charge with the logical request (the client's key) the call names.
type processor struct {
	srv   *httptest.Server
	kills *killer

	mu      sync.Mutex
	calls   []call
	charges []call
	byKey   map[string]string // the charge id of each Idempotency-Key
}

// call is one call to the processor, or one charge it made: the
// Idempotency-Key it came with, the logical request it names, the charge
// id and when.
type call struct {
	EffectKey, Request, Charge string
	At                         time.Time
}

// chargeRequest is the body of a call to the processor: the logical
// request it charges for, its client's key and body ("k12 {...}").
type chargeRequest struct {
	Request string `json:"request"`
}

// logical names the logical request of key and body, as a charge does.
func logical(key, body string) string { return key + " " + body }

// chargeAnswer is the processor's answer.
type chargeAnswer struct {
	ID string `json:"id"`
}

func newProcessor(t *testing.T, kills *killer) *processor {
	p := &processor{byKey: map[string]string{}, kills: kills}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// serve charges, or answers a key it has seen with its charge, after a
// pause of up to 8 ms. A kill of the service during the pause leaves a
// charge whose answer, and so whose phase record, never came; after a new
// charge the processor brings one about now and then.
func (p *processor) serve(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Request == "" {
		http.Error(w, "a charge names its request", http.StatusBadRequest)
		return
	}
	ek := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	id, seen := p.byKey[ek]
	if !seen || ek == "" {
		id = fmt.Sprintf("ch_%d", len(p.charges)+1)
		p.byKey[ek] = id
		p.charges = append(p.charges, call{EffectKey: ek, Request: req.Request, Charge: id, At: time.Now()})
	}
	p.calls = append(p.calls, call{EffectKey: ek, Request: req.Request, Charge: id, At: time.Now()})
	p.mu.Unlock()
	if !seen {
		p.kills.maybe("kill -9 after a charge")
	}
	time.Sleep(time.Duration(1+rand.IntN(8)) * time.Millisecond)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(chargeAnswer{ID: id})
}

// record returns the calls and the charges so far.
func (p *processor) record() (calls, charges []call) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...), append([]call(nil), p.charges...)
}

// receiver is where the service's outbox runner delivers receipts, in the
// test process. It refuses one delivery in refuseOneIn with a 503 and
// records nothing of it, as a receiver that is briefly away; it records
// every other with its effect key and when it came, and now and then
// kills the service before it answers: between a delivery and its record.
type receiver struct {
	srv   *httptest.Server
	kills *killer

	mu         sync.Mutex
	deliveries []delivery
	refused    int
}

// refuseOneIn is how often the receiver refuses a delivery.
const refuseOneIn = 5

// delivery is one receipt the receiver accepted.
type delivery struct {
	EffectKey string
	Receipt   receipt
	At        time.Time
}

// receipt is the payload of a request's receipt: the execution it was
// staged by (key, run and request, as its effect row names them), the
// request's body and the charge it reports.
type receipt struct {
	Key    string `json:"key"`
	Run    string `json:"run"`
	Req    string `json:"req"`
	Body   string `json:"body"`
	Charge string `json:"charge"`
}

func newReceiver(t *testing.T, kills *killer) *receiver {
	rc := &receiver{kills: kills}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var rec receipt
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		http.Error(w, "not a receipt", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	if rand.IntN(refuseOneIn) == 0 {
		rc.refused++
		rc.mu.Unlock()
		http.Error(w, "away for a moment", http.StatusServiceUnavailable)
		return
	}
	rc.deliveries = append(rc.deliveries, delivery{EffectKey: r.Header.Get("Idempotency-Key"), Receipt: rec, At: time.Now()})
	rc.mu.Unlock()
	rc.kills.maybe("kill -9 after a delivery")
	w.WriteHeader(http.StatusNoContent)
}

// record returns the deliveries accepted and the count refused so far.
func (rc *receiver) record() ([]delivery, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.deliveries...), rc.refused
}

// killOneIn is how often the processor kills the service after a new
// charge, and the receiver after a delivery it accepted, once a gap has
// passed since the last such kill.
const killOneIn = 10

// killGap is the mean gap between those kills in a run checked against
// the contract: as often as the other faults.
const killGap = 2 * time.Second

// killer is the service's kill -9 and restart (run.arm), which the
// processor and the receiver call at two points of an effect's life: after
// the processor's charge and before its phase is recorded, and after a
// delivery and before its record.
type killer struct {
	gap  time.Duration // the mean gap between kills
	mu   sync.Mutex
	kill func(kind string)
	next time.Time
}

// set is run.arm.
func (k *killer) set(kill func(kind string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kill = kill
	k.next = time.Now().Add(k.gap / 2)
}

// maybe kills the service, recording the fault as kind, one time in
// killOneIn once armed and due.
func (k *killer) maybe(kind string) {
	k.mu.Lock()
	kill := k.kill
	due := kill != nil && time.Now().After(k.next) && rand.IntN(killOneIn) == 0
	if due {
		k.next = time.Now().Add(k.gap/2 + rand.N(k.gap))
	}
	k.mu.Unlock()
	if due {
		kill(kind)
	}
}

// phaseRecord is a recorded charge phase: the charge id it holds and when
// it was recorded, by the database's clock on this machine.
type phaseRecord struct {
	Result string
	At     time.Time
}
