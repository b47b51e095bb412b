package idem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// processor is a payment processor that honours Idempotency-Key: a repeat
// of a key gets the first answer and charges nothing.
type processor struct {
	mu      sync.Mutex
	charges map[string]int // by Idempotency-Key
	total   int
}

func (p *processor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := r.Header.Get("Idempotency-Key")
	if _, seen := p.charges[k]; !seen || k == "" {
		p.total++
		p.charges[k] = p.total
	}
	fmt.Fprintf(w, `{"id":"ch_%d"}`, p.charges[k])
}

func ExampleEffectKey() {
	proc := &processor{charges: map[string]int{}}
	ps := httptest.NewServer(proc)
	defer ps.Close()
	client, _ := idemclient.New(idemclient.Config{}) // no operations of ours
	fail := true
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// docs:begin effect-key
		key, err := idem.EffectKey(r.Context(), "charge")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ctx := idemclient.WithEffectKey(r.Context(), key)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ps.URL+"/v1/charges", strings.NewReader(`{"amount":500}`))
		res, err := client.Client().Do(req) // sent with Idempotency-Key: key
		// docs:end effect-key
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_ = res.Body.Close()
		if fail {
			// The handler fails after the charge: the key is released and
			// the retry runs the handler, and the charge, again.
			fail = false
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	engine, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{examplePolicy()},
		// docs:begin single-tenant
		Tenant: idem.SingleTenant("billing"),
		// docs:end single-tenant
	})
	if err != nil {
		panic(err)
	}
	h := engine.Middleware(handler)
	send(h, "order-7")
	send(h, "order-7")
	fmt.Println("charges:", proc.total)
	// Output:
	// 500  replayed: false
	// 201  replayed: false
	// charges: 1
}

func ExamplePhase() {
	charged := 0
	charge := func(ctx context.Context, effectKey string) (string, error) {
		charged++ // a processor that would charge twice if called twice
		return fmt.Sprintf("ch_%d", charged), nil
	}
	fail := true
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// docs:begin phase
		id, err := idem.Phase(r.Context(), "charge", func(ctx context.Context, effectKey string) ([]byte, error) {
			chargeID, err := charge(ctx, effectKey) // the processor's call, with the effect key
			return []byte(chargeID), err
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		// docs:end phase
		if fail {
			// The run dies after the charge was recorded; the retry
			// receives the recorded charge instead of charging again.
			fail = false
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q}`, id)
	})
	h := exampleEngine().Middleware(handler)
	send(h, "order-8")
	send(h, "order-8")
	fmt.Println("charges:", charged)
	// Output:
	// 500  replayed: false
	// 201 {"charge":"ch_1"} replayed: false
	// charges: 1
}
