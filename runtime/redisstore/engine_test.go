package redisstore_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// The tests in this file drive the whole engine (idem.Engine) over real
// HTTP on loopback, with the store on a real Redis and a real Redis
// Cluster behind it.

// Proof: 64 concurrent duplicates of each of 200 requests through the
// engine. Every key runs its handler exactly once; every other answer is a
// 409 request-in-progress with a short Retry-After or a byte-identical
// replay; the observer counts 200 executions and the rest as replays and
// conflicts.
func TestEngineConcurrentDuplicates(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(3 * time.Millisecond)
			enginetest.Created(w, r.Header.Get("Idempotency-Key"))
		})
		es := enginetest.ServeEngine(t, s, handler, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.FailClosed, false))
		enginetest.DuplicateStorm(t, es, 64, 200)
	})
}

// Redis has no transaction a handler's writes could join, so idem.New
// refuses a transactional policy on the store, and says which store.
func TestEngineRefusesTransactional(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		_, err := idem.New(idem.Config{
			Store:    s,
			Policies: []idem.Policy{enginetest.EnginePolicy("createPayment", "/payments", time.Minute, idemstore.Takeover, true)},
			Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		})
		if err == nil {
			t.Fatal("idem.New accepted a transactional policy on a Redis store")
		}
		for _, want := range []string{"createPayment", "transactional", "*redisstore.Store"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("idem.New error %q does not mention %q", err, want)
			}
		}
	})
}
