package pgstore_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// Proof: the database goes away while requests flow through the engine.
// Claims that cannot reach it answer 503 idempotency-store-unavailable with
// Retry-After and never run the handler; once the database is back at the
// same address the same engine and pool serve again. A completion lost
// after the handler ran leaves the client with the handler's answer and the
// key in flight: a retry meets 409 request-in-progress while the lease
// runs, and, fail-closed, 409 outcome-unknown after it.
func TestEngineDatabaseOutage(t *testing.T) {
	schema := newSchema(t)
	upstream := upstreamAddr(t)
	var current atomic.Pointer[proxy]
	current.Store(startProxy(t, "127.0.0.1:0", upstream))
	addr := current.Load().addr
	pool := openPoolVia(t, schema, addr)

	// The lease is short so that the fail-closed verdict comes within the
	// test; it is long enough for a retry to meet the claim in flight.
	const lease = 2 * time.Second
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Cut-Database") == "1" {
			// The database goes away after the claim and before the
			// completion.
			current.Load().stop()
		}
		enginetest.Created(w, r.Header.Get("Idempotency-Key"))
	})
	es := enginetest.ServeEngine(t, pgstore.New(pool), handler,
		enginetest.EnginePolicy("createTransfer", "/transfers", lease, idemstore.FailClosed, false))
	const body = `{"amount":100,"to":"acc_1"}`
	restart := func() { current.Store(startProxy(t, addr, upstream)) }
	unavailable := 0 // 503s the clients saw

	// Before the outage.
	before := es.MustPost(t, "/transfers", "before", body)
	if before.Status != http.StatusCreated || before.Replayed() {
		t.Fatalf("before the outage: %v", before)
	}

	// During the outage: new keys and a replay alike are refused promptly,
	// and nothing runs.
	current.Load().stop()
	for _, key := range []string{"during-1", "during-2", "during-3", "before"} {
		start := time.Now()
		a := es.MustPost(t, "/transfers", key, body)
		if err := enginetest.CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
			t.Errorf("%s during the outage: %v", key, err)
		}
		unavailable++
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s during the outage answered after %v, want a prompt 503", key, d)
		}
	}
	for _, key := range []string{"during-1", "during-2", "during-3"} {
		if n := es.RunsOf(key); n != 0 {
			t.Errorf("%s: handler ran %d times during the outage, want 0", key, n)
		}
	}
	if n := es.RunsOf("before"); n != 1 {
		t.Errorf("before: handler ran %d times, want 1", n)
	}

	// The database is back at the same address: the same engine serves,
	// without a restart, once the pool has dialled anew.
	restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		a := es.MustPost(t, "/transfers", "during-1", body)
		if a.Status == http.StatusCreated && !a.Replayed() {
			break
		}
		if err := enginetest.CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
			t.Fatalf("during-1 after the outage: %v", err)
		}
		unavailable++
		if time.Now().After(deadline) {
			t.Fatalf("still %v 5s after the database came back", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, key := range []string{"during-2", "during-3"} {
		if a := es.MustPost(t, "/transfers", key, body); a.Status != http.StatusCreated || a.Replayed() {
			t.Errorf("%s after the outage: %v, want a fresh 201", key, a)
		}
	}
	if err := enginetest.CheckReplay(es.MustPost(t, "/transfers", "before", body), before); err != nil {
		t.Errorf("replay of a key stored before the outage: %v", err)
	}
	for _, key := range []string{"before", "during-1", "during-2", "during-3"} {
		if n := es.RunsOf(key); n != 1 {
			t.Errorf("%s: handler ran %d times, want 1", key, n)
		}
	}

	// The completion fails after the handler ran: the client still gets
	// the handler's answer.
	claimed := time.Now()
	lost := es.MustPost(t, "/transfers", "lost", body, "X-Cut-Database", "1")
	if lost.Status != http.StatusCreated || lost.Replayed() {
		t.Fatalf("request whose completion failed: %v, want the handler's own 201", lost)
	}
	restart()
	enginetest.LostCompletion(t, es, "lost", body, claimed, lease, unavailable)
}
