// Package adaptertest is what the tests of the router adapters (idemgin,
// idemecho) share: an engine with one transactional operation on a SQLite
// store that also holds the table its handler writes, the tenant an
// adapter's authentication puts in the request's context, and the request
// the tests send; and an engine whose tenant is a request header, for the
// tests of one tenant's request served with another's router context.
package adaptertest

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Op is the operation the engine protects: a transactional POST /transfers.
const Op = "createTransfer"

// Engine serves Op on a SQLite store of the test's own that also holds a
// transfers table (amount INTEGER), for the tenant WithTenant put in the
// request's context. Each of adjust then changes the engine's Config
// (other policies, a logger) for what its test is about.
func Engine(t *testing.T, adjust ...func(*idem.Config)) (*idem.Engine, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE transfers (amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	p := idemtest.Policy(Op, "/transfers", func(p *idem.Policy) {
		p.Transactional, p.OnLeaseExpiry = true, idemstore.Takeover
	})
	cfg := idem.Config{Store: s, Policies: []idem.Policy{p}, Tenant: func(r *http.Request) (string, bool) {
		v, ok := r.Context().Value(tenantKey{}).(string)
		return v, ok
	}}
	for _, f := range adjust {
		f(&cfg)
	}
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, s.DB()
}

type tenantKey struct{}

// WithTenant is r with tenant acme in its context, as an adapter's
// authentication middleware sets it before the engine.
func WithTenant(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), tenantKey{}, "acme"))
}

// Post sends h a JSON body to POST /transfers under key.
func Post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Transfers counts the rows of the transfers table.
func Transfers(t *testing.T, db *sql.DB) (n int) {
	t.Helper()
	if err := db.QueryRow(`SELECT count(*) FROM transfers`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
