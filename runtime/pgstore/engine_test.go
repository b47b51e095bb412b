package pgstore_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// The tests in this file drive the whole engine (idem.Engine) over real
// HTTP on loopback, with pgstore on a real PostgreSQL behind it.

// Proof: 64 concurrent duplicates of each of 200 requests through the engine
// on PostgreSQL. Every key runs its handler exactly once; every other
// answer is a 409 request-in-progress with a short Retry-After or a
// byte-identical replay; the observer counts 200 executions and the rest
// as replays and conflicts.
func TestEngineConcurrentDuplicates(t *testing.T) {
	s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond)
		enginetest.Created(w, r.Header.Get("Idempotency-Key"))
	})
	es := enginetest.ServeEngine(t, s, handler, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.FailClosed, false))
	enginetest.DuplicateStorm(t, es, 64, 200)
}

// Proof: transactional mode through the engine. The handler's business
// write and the key's completion commit together or not at all; the
// database ends the transaction of a handler that idles past its lease.
func TestEngineTransactional(t *testing.T) {
	testURL(t)
	enginetest.RunTx[pgx.Tx](t, target(func(c *pgxpool.Config) { c.MaxConns = 8 }))
}
