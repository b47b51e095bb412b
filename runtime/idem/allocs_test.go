package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// The engine's allocations per request, over the bare handler's, for each
// path a keyed request can take. Allocation counts do not depend on the
// machine's load, so CI holds them where timing could not: a change that
// allocates more on a hot path fails here. The ceilings are the counts
// measured when they were set (33, 19, 18, 22 and 10) and two more, for
// another Go release's runtime; lower them when the engine allocates less.
func TestAllocationsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	release, holding := make(chan struct{}), make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get("X-Hold") != "" {
			close(holding)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"tr_1","amount":1000,"to":"acc_2"}`)
	})
	engine, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{transferPolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	protected := engine.Middleware(handler)
	serve := func(h http.Handler, key, body string, hold bool) int {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		if hold {
			r.Header.Set("X-Hold", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const body, other = `{"amount": 1000, "to": "acc_2"}`, `{"amount": 1001, "to": "acc_2"}`
	if code := serve(protected, "done", body, false); code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	held := make(chan int)
	go func() { held <- serve(protected, "held", body, true) }()
	<-holding
	defer func() { close(release); <-held }()

	var seq atomic.Int64
	bare := testing.AllocsPerRun(200, func() { serve(handler, "", body, false) })
	for _, path := range []struct {
		name    string
		want    int
		ceiling float64
		do      func() int
	}{
		{"new key", http.StatusCreated, 35, func() int { return serve(protected, fmt.Sprint("k", seq.Add(1)), body, false) }},
		{"replay", http.StatusCreated, 21, func() int { return serve(protected, "done", body, false) }},
		{"in flight", http.StatusConflict, 20, func() int { return serve(protected, "held", body, false) }},
		{"reused for another request", http.StatusUnprocessableEntity, 24, func() int { return serve(protected, "done", other, false) }},
		{"keyless", http.StatusBadRequest, 12, func() int { return serve(protected, "", body, false) }},
	} {
		if code := path.do(); code != path.want {
			t.Fatalf("%s: status %d, want %d", path.name, code, path.want)
		}
		extra := testing.AllocsPerRun(200, func() { path.do() }) - bare
		t.Logf("%s: %.0f allocations over the bare handler's %.0f", path.name, extra, bare)
		if extra > path.ceiling {
			t.Errorf("%s: %.0f allocations over the bare handler's, more than %.0f", path.name, extra, path.ceiling)
		}
	}
}

// The engine's allocations per request on a transactional operation, the
// path of the example's transfers: claim inside a transaction, the
// handler takes it through TxHandler, the completion commits. The store
// wins every claim with a transaction that allocates nothing, so the
// count is the engine's alone; the ceiling is the count measured when it
// was set (25) and two more.
func TestTransactionalAllocationsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	handle := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"tr_1","amount":1000,"to":"acc_2"}`)
	}
	p := transferPolicy()
	p.Transactional = true
	engine, err := idem.New(idem.Config{
		Store:    freeTransactor{memstore.New()},
		Policies: []idem.Policy{p},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	protected := engine.Middleware(idem.TxHandler(p.OperationID, func(w http.ResponseWriter, r *http.Request, _ freeDriver) {
		handle(w, r)
	}))
	serve := func(h http.Handler, key string) int {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 1000, "to": "acc_2"}`))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := serve(protected, "k"); code != http.StatusCreated {
		t.Fatalf("status %d, want 201", code)
	}
	bare := testing.AllocsPerRun(200, func() { serve(http.HandlerFunc(handle), "") })
	extra := testing.AllocsPerRun(200, func() { serve(protected, "k") }) - bare
	t.Logf("new key, transactional: %.0f allocations over the bare handler's %.0f", extra, bare)
	const ceiling = 27
	if extra > ceiling {
		t.Errorf("new key, transactional: %.0f allocations over the bare handler's, more than %d", extra, ceiling)
	}
}

// freeTransactor wins every transactional claim with freeTx.
type freeTransactor struct{ *memstore.Store }

func (freeTransactor) ClaimTx(context.Context, idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	return idemstore.Result{Won: true}, freeTx{}, nil
}

func (freeTransactor) Begin(context.Context, time.Duration) (idemstore.Tx, error) {
	return freeTx{}, nil
}

// freeTx is a transaction that writes nothing and allocates nothing.
type freeTx struct{}

type freeDriver struct{}

func (freeTx) Driver() any                                      { return freeDriver{} }
func (freeTx) Commit(context.Context, idemstore.Response) error { return nil }
func (freeTx) Rollback(context.Context) error                   { return nil }
