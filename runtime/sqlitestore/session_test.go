package sqlitestore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// A handler's session does not outlive its request: a TEMP table one
// tenant's handler fills is gone when the next request, another tenant's,
// runs on the same connection, whether the first request's transaction
// committed (a stored answer) or was rolled back (503), and whether it had
// a key or not.
func TestTempTableDoesNotReachTheNextTenant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		key    bool
	}{
		{"committed", http.StatusCreated, true},
		{"rolled back", http.StatusServiceUnavailable, true},
		{"keyless committed", http.StatusCreated, false},
		{"keyless rolled back", http.StatusServiceUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			// One connection: the next request runs on the connection the
			// first one's handler used.
			s.DB().SetMaxOpenConns(1)
			tenant := func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true }
			h := attackEngineTenant(t, s, 30*time.Second, tenant, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
				ctx := r.Context()
				if r.Header.Get("X-Tenant") == "tenant-a" {
					if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE scratch AS SELECT 'tenant-a card 4242' AS secret`); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					w.WriteHeader(tc.status)
					return
				}
				var secret string
				err := tx.QueryRowContext(ctx, `SELECT secret FROM scratch`).Scan(&secret)
				if err == nil {
					_, _ = w.Write([]byte("read " + secret))
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			post := func(tenant, key string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("X-Tenant", tenant)
				if tc.key {
					r.Header.Set("Idempotency-Key", key)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			if w := post("tenant-a", "a1"); w.Code != tc.status {
				t.Fatalf("tenant-a = %d %s, want %d", w.Code, w.Body, tc.status)
			}
			if w := post("tenant-b", "b1"); w.Code != http.StatusCreated {
				t.Errorf("tenant-b = %d %q: the first tenant's TEMP table reached it", w.Code, w.Body)
			}
		})
	}
}

// What a handler may still do on its connection: describe the schema, and
// defer its foreign keys, which SQLite resets with the transaction.
func TestHandlerMayDescribeTheSchema(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	h := tx.Driver().(*sqlitestore.Tx)
	var column string
	if err := h.QueryRowContext(ctx, `SELECT name FROM pragma_table_info('effects')`).Scan(&column); err != nil || column != "marker" {
		t.Errorf("pragma_table_info = %q, %v; want marker", column, err)
	}
	for _, q := range []string{`PRAGMA table_info(effects)`, `PRAGMA main.index_list(effects)`, `PRAGMA foreign_key_check`, `PRAGMA defer_foreign_keys = ON`} {
		if _, err := h.ExecContext(ctx, q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}
