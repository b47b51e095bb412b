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

// The authorizer refuses a temporary table, view or trigger named as one of
// the store's tables (storeObject). ALTER TABLE shows it the table's old
// name only, so a temporary table made under another name and renamed to
// idempotency_keys would shadow the store's table all the same (ALTER
// TABLE is refused altogether now), and a temporary virtual table
// (SQLITE_CREATE_VTABLE) was once not looked at. Were either to pass, the
// completion, an unqualified UPDATE run on the handler's connection,
// would write the copy: the client would get 201, the key's row would
// stay in flight, and the retry after the lease would take the key over
// and commit the handler's write a second time (docs/semantics.md §7.2).
// The store's statements name main's tables besides.
func TestStoreStatementsNameMainsTables(t *testing.T) {
	cases := map[string][]string{
		"temporary table renamed": {
			`CREATE TEMP TABLE scratch AS SELECT * FROM main.idempotency_keys`,
			`ALTER TABLE temp.scratch RENAME TO idempotency_keys`,
		},
		"temporary table renamed, unqualified, in another case": {
			`CREATE TEMP TABLE scratch AS SELECT * FROM main.idempotency_keys`,
			`ALTER TABLE scratch RENAME TO Idempotency_Keys`,
		},
		"temporary virtual table": {
			`CREATE VIRTUAL TABLE temp.idempotency_keys USING fts5(tenant, scope, key, lease_token, state, status, headers, body, body_omitted, completed_at, lease_until)`,
			`INSERT INTO temp.idempotency_keys (tenant, scope, key, lease_token, state) SELECT tenant, scope, key, lease_token, state FROM main.idempotency_keys`,
		},
	}
	for name, shadow := range cases {
		t.Run(name, func(t *testing.T) {
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
				for _, q := range append([]string{`INSERT INTO effects (marker) VALUES ('charge')`}, shadow...) {
					if _, err := tx.ExecContext(r.Context(), q); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				}
				w.WriteHeader(http.StatusCreated)
			}))
			first := postAttack(h, "k1")
			var state string
			_ = s.DB().QueryRowContext(context.Background(), `SELECT state FROM main.idempotency_keys WHERE key = 'k1'`).Scan(&state)
			t.Logf("first: %d %s; the key's row is then %q", first.Code, first.Body, state)
			time.Sleep(lease + 200*time.Millisecond)
			retry := postAttack(h, "k1")
			t.Logf("retry after the lease: %d replayed=%q", retry.Code, retry.Header().Get("Idempotent-Replayed"))
			if n := countMarker(t, s, "charge"); n > 1 {
				t.Fatalf("one key ran the handler %d times and committed its write %d times", runs.Load(), n)
			}
		})
	}
}
