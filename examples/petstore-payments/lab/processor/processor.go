// Package processor is the fake payment processor of the example's days: a
// process of its own (lab/cmd/processor) that petstore-payments charges
// over HTTP for each transfer, and the receipt receiver the service's
// outbox delivers to.
//
// Charges honour Idempotency-Key as real processors do: the first charge
// under a key is the only one, and every later request with the key is
// answered with it. Receipts ignore keys, as an e-mail gateway does: every
// receipt received is kept, duplicates included. Both are appended to
// journals in the processor's directory, so that a restart after kill -9
// remembers every key it answered, and the days count what it did.
package processor

import (
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"time"
)

// Charge is one charge the processor made.
type Charge struct {
	ID string `json:"id"`
	// IdempotencyKey is the key it was made under; "" for none.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	// Description is the caller's: petstore-payments sends the transfer's
	// memo, by which the days find each logical request's charges.
	Description string `json:"description"`
}

// Receipt is one receipt the receiver was handed.
type Receipt struct {
	// IdempotencyKey is the header the sender sent, kept to show what a
	// receiver that honoured it would have turned away; it is ignored.
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Body           json.RawMessage `json:"body"`
	// ReceivedAt is when it was kept.
	ReceivedAt time.Time `json:"received_at"`
}

// Processor charges and receives receipts.
type Processor struct {
	delay time.Duration

	mu       sync.Mutex
	charges  []Charge
	byKey    map[string]int // key → index in charges
	receipts []Receipt
	chargeJ  *journal
	receiptJ *journal
}

// Journal file names in a processor's directory.
const (
	ChargesFile  = "charges.jsonl"
	ReceiptsFile = "receipts.jsonl"
)

// Open opens the processor whose journals are in dir, reading back every
// charge and receipt of its earlier runs. Each request waits a random
// time up to delay before it is served, so that kills land mid-call.
func Open(dir string, delay time.Duration) (*Processor, error) {
	p := &Processor{delay: delay, byKey: map[string]int{}}
	var err error
	p.chargeJ, err = openJournal(filepath.Join(dir, ChargesFile), func(line []byte) error {
		var c Charge
		if err := json.Unmarshal(line, &c); err != nil {
			return err
		}
		p.add(c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.receiptJ, err = openJournal(filepath.Join(dir, ReceiptsFile), func(line []byte) error {
		var r Receipt
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		p.receipts = append(p.receipts, r)
		return nil
	})
	if err != nil {
		_ = p.chargeJ.close()
		return nil, err
	}
	return p, nil
}

// Close closes the journals.
func (p *Processor) Close() error {
	return errors.Join(p.chargeJ.close(), p.receiptJ.close())
}

func (p *Processor) add(c Charge) {
	if c.IdempotencyKey != "" {
		p.byKey[c.IdempotencyKey] = len(p.charges)
	}
	p.charges = append(p.charges, c)
}

// Handler serves POST /v1/charges, POST /v1/receipts, the lists GET
// /v1/charges and GET /v1/receipts, and GET /healthz.
func (p *Processor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.charge)
	mux.HandleFunc("POST /v1/receipts", p.receive)
	mux.HandleFunc("GET /v1/charges", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string][]Charge{"charges": p.charges})
	})
	mux.HandleFunc("GET /v1/receipts", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string][]Receipt{"receipts": p.receipts})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// pause waits the request's random delay.
func (p *Processor) pause() {
	if p.delay > 0 {
		time.Sleep(rand.N(p.delay))
	}
}

// charge makes a charge, or answers the one made under the request's
// Idempotency-Key with Idempotent-Replayed: true.
func (p *Processor) charge(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount      int64  `json:"amount"`
		Currency    string `json:"currency"`
		Description string `json:"description"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&in); err != nil || in.Amount <= 0 || len(in.Currency) != 3 {
		http.Error(w, "want {\"amount\": a positive integer, \"currency\": 3 letters, \"description\": text}", http.StatusBadRequest)
		return
	}
	p.pause()
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byKey[key]; ok && key != "" {
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, p.charges[i])
		return
	}
	c := Charge{ID: "ch_" + randomHex(), IdempotencyKey: key, Amount: in.Amount, Currency: in.Currency, Description: in.Description}
	if err := p.chargeJ.append(c); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.add(c)
	writeJSON(w, http.StatusCreated, c)
}

// receive keeps a receipt, whatever its key: every delivery counts.
func (p *Processor) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil || !json.Valid(body) {
		http.Error(w, "want a JSON body", http.StatusBadRequest)
		return
	}
	p.pause()
	p.mu.Lock()
	rec := Receipt{IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body, ReceivedAt: time.Now().UTC()}
	defer p.mu.Unlock()
	if err := p.receiptJ.append(rec); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.receipts = append(p.receipts, rec)
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func randomHex() string {
	var b [12]byte
	if _, err := crand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("processor: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}
