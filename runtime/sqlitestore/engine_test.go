package sqlitestore_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// The tests in this file drive the whole engine (idem.Engine) over real
// HTTP on loopback, with sqlitestore on a SQLite file behind it, using the
// HTTP harness of storetest/enginetest that every store's engine tests share.

// Proof: concurrent duplicates through the engine on SQLite: 64 concurrent
// duplicates of each of 200 requests. Every key runs its handler exactly
// once; every other answer is a 409 request-in-progress with a short
// Retry-After or a byte-identical replay; the observer agrees, which also
// means no completion failed: under this storm a completion must not lose
// SQLite's write lock to new claims until it times out (see Store.write).
func TestEngineConcurrentDuplicates(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond)
		enginetest.Created(w, r.Header.Get("Idempotency-Key"))
	})
	es := enginetest.ServeEngine(t, openStore(t), handler, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.FailClosed, false))
	enginetest.DuplicateStorm(t, es, 64, 200)
}

// Proof: transactional mode through the engine on SQLite. The handler's
// business write and the key's completion commit together or not at all;
// the store rolls back the transaction of a handler that runs past its
// lease.
func TestEngineTransactional(t *testing.T) {
	enginetest.RunTx[*sqlitestore.Tx](t, target)
}
