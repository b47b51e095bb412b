package sqlitestore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// The tests in this file drive the whole engine (idem.Engine) over real
// HTTP on loopback, with sqlitestore on a SQLite file behind it, using the
// HTTP harness of storetest that the pgstore engine tests share.

// Proof: concurrent duplicates through the engine on SQLite: 64 concurrent
// duplicates of each of 200 requests. Every key runs its handler exactly
// once; every other answer is a 409 request-in-progress with a short
// Retry-After or a byte-identical replay; the observer agrees, which also
// means no completion failed: under this storm a completion once lost
// SQLite's write lock to new claims until it timed out (see Store.write).
func TestEngineConcurrentDuplicates(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond)
		storetest.Created(w, r.Header.Get("Idempotency-Key"))
	})
	es := storetest.ServeEngine(t, openStore(t), handler, storetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idem.FailClosed, false))
	storetest.DuplicateStorm(t, es, 64, 200)
}

// Proof: transactional mode through the engine on SQLite. The handler's
// business write and the key's completion commit together or not at all;
// the store rolls back the transaction of a handler that runs past its
// lease.
func TestEngineTransactional(t *testing.T) {
	s := openStore(t)
	if _, err := s.DB().ExecContext(context.Background(), `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	storetest.EngineTx(t, s,
		func(ctx context.Context, tx *sqlitestore.Tx, marker string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, marker)
			return err
		},
		func(ctx context.Context, marker string) (int, error) {
			var n int
			err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE marker = ?`, marker).Scan(&n)
			return n, err
		})
}
