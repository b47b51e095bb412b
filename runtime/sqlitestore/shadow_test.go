package sqlitestore_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Nothing a handler makes on its connection answers for the statements
// that end its transaction (docs/semantics.md §7.2): the completion is an
// UPDATE of idempotency_keys, unqualified, run on the handler's connection
// after the handler returns, and SQLite resolves an unqualified name in the
// temporary schema first. A temporary copy of the table would have the
// completion write the copy, and a trigger on the table could undo it:
// either way the client gets its 201, the key's row stays in flight, and
// the retry after the lease takes the key over and runs the handler a
// second time. The handler's statement is refused instead.
func TestAShadowOfTheStoreTablesIsRefused(t *testing.T) {
	cases := map[string]string{
		"temporary copy": `CREATE TEMP TABLE IF NOT EXISTS idempotency_keys AS SELECT * FROM main.idempotency_keys`,
		"temporary view": `CREATE TEMP VIEW Idempotency_Keys AS SELECT * FROM main.idempotency_keys`,
		"temporary trigger": `CREATE TEMP TRIGGER undo AFTER UPDATE ON main.idempotency_keys
			BEGIN UPDATE main.idempotency_keys SET state = 'in_flight' WHERE rowid = new.rowid; END`,
		"trigger": `CREATE TRIGGER undo AFTER UPDATE ON idempotency_keys
			BEGIN UPDATE idempotency_keys SET state = 'in_flight' WHERE rowid = new.rowid; END`,
		"renamed table": `ALTER TABLE idempotency_keys RENAME TO idempotency_keys_old`,
	}
	for name, shadow := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t)
			var runs atomic.Int64
			const lease = time.Second
			h := attackEngineLease(t, s, lease, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, err := idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				// The write first, so that a refused shadow leaves the
				// handler with a write to commit if it carries on.
				for _, q := range []string{`INSERT INTO effects (marker) VALUES ('charge')`, shadow} {
					if _, err := tx.ExecContext(r.Context(), q); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				}
				w.WriteHeader(http.StatusCreated)
			}))
			first := postAttack(h, "k1")
			var state string
			if err := s.DB().QueryRowContext(context.Background(), `SELECT state FROM main.idempotency_keys WHERE key = 'k1'`).Scan(&state); err != nil && first.Code == http.StatusCreated {
				t.Fatal(err)
			}
			if first.Code == http.StatusCreated && state != "completed" {
				t.Errorf("the client got 201, yet the key's row is %q: the completion did not write it", state)
			}
			time.Sleep(lease + 200*time.Millisecond)
			retry := postAttack(h, "k1")
			if n := countMarker(t, s, "charge"); n > 1 {
				t.Fatalf("first %d (row then %q), retry after the lease %d replayed=%q: one key ran the handler %d times and committed its write %d times",
					first.Code, state, retry.Code, retry.Header().Get("Idempotent-Replayed"), runs.Load(), n)
			}
		})
	}
}
