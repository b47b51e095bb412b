package proc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The points at which a phase kill test's child is killed (PhaseHandler's
// X-Hang header): after the processor's call and before the phase's
// record, and after the record.
const (
	HangAfterCall   = "after-call"
	HangAfterRecord = "after-record"
)

// Processor is a fake payment processor, run by the parent of a phase kill
// test, that counts the calls it receives by their Idempotency-Key. One
// that honours keys charges once per key and answers a repeat with the
// first charge; one that does not charges on every call, so that only the
// phase record can keep a request to one charge.
type Processor struct {
	honour bool
	srv    *httptest.Server

	mu      sync.Mutex
	calls   map[string]int
	charge  map[string]string // the first charge's id, by key
	charges int
}

// NewProcessor starts a processor until the test ends.
func NewProcessor(t *testing.T, honourKeys bool) *Processor {
	p := &Processor{honour: honourKeys, calls: map[string]int{}, charge: map[string]string{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *Processor) serve(w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[k]++
	id, seen := p.charge[k]
	if !seen || !p.honour || k == "" {
		p.charges++
		id = fmt.Sprintf("ch_%d", p.charges)
		p.charge[k] = id
	}
	_, _ = io.WriteString(w, id)
}

// URL is where the processor takes charges.
func (p *Processor) URL() string { return p.srv.URL }

// Calls reports the calls made with each Idempotency-Key.
func (p *Processor) Calls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.calls))
	for k, n := range p.calls {
		out[k] = n
	}
	return out
}

// Charges reports how many charges the processor made.
func (p *Processor) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges
}

// PhaseHandler is the handler of the phase kill tests, in the child and
// the restarted parent alike. It charges the processor at url in phase
// "charge", with the phase's effect key as the call's Idempotency-Key,
// then calls write (a transactional handler's business write, or nil)
// and answers 201 with the charge's id. A request with X-Hang set prints
// "ready" at that point (HangAfterCall, HangAfterRecord) and waits to be
// killed.
func PhaseHandler(url string, write func(r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hang := r.Header.Get("X-Hang")
		id, err := idem.Phase(r.Context(), "charge", func(ctx context.Context, effectKey string) ([]byte, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/charges", strings.NewReader(`{"amount":500}`))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Idempotency-Key", effectKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return nil, err
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err == nil && hang == HangAfterCall {
				waitToBeKilled()
			}
			return body, err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if hang == HangAfterRecord {
			waitToBeKilled()
		}
		if write != nil {
			if err := write(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(id)
	})
}

// waitToBeKilled says "ready" to the parent and waits for its SIGKILL.
func waitToBeKilled() {
	fmt.Println("ready")
	time.Sleep(2 * time.Minute)
	panic("the child was not killed")
}

// CheckPhaseKill checks what the processor saw once a request, whose
// first run was killed at point, was retried to its answer (retried,
// the charge id it answered): one charge, and a second call only for a
// phase whose record the kill prevented, with the same effect key.
func CheckPhaseKill(t *testing.T, p *Processor, point string, retried []byte) {
	t.Helper()
	calls := p.Calls()
	if len(calls) != 1 {
		t.Fatalf("the processor saw %d effect keys (%v) for one request, want 1", len(calls), calls)
	}
	for _, n := range calls {
		want := 1
		if point == HangAfterCall {
			want = 2 // the record was never made: called again, with the same key
		}
		if n != want {
			t.Errorf("killed %s: the processor was called %d times, want %d", point, n, want)
		}
	}
	if p.honour || point == HangAfterRecord {
		if c := p.Charges(); c != 1 {
			t.Errorf("killed %s: %d charges for one request, want 1", point, c)
		}
		if string(retried) != "ch_1" {
			t.Errorf("killed %s: the retry answered charge %q, want the first, ch_1", point, retried)
		}
	}
}
