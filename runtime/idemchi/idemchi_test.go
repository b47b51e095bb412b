package idemchi_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemchi"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

type tenantKey struct{}

// newEngine serves a transactional createTransfer and a plain createPet,
// on a SQLite store that also holds a transfers table. The tenant is what
// the authentication middleware put in the request's context.
func newEngine(t *testing.T, basePath string) (*idem.Engine, *sql.DB) {
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
	policy := func(id, path string, tx bool) idem.Policy {
		p := idemtest.Policy(id, path, func(p *idem.Policy) {
			p.Scope, p.TTL, p.Transactional = idem.ScopeTenant, time.Hour, tx
		})
		if strings.Contains(path, "{petId}") {
			p.Fingerprint.Path = []string{"petId"}
		}
		return p
	}
	e, err := idem.New(idem.Config{
		Store:    s,
		BasePath: basePath,
		Policies: []idem.Policy{policy("createTransfer", "/transfers", true), policy("createPet", "/pets/{petId}/photos", false)},
		Tenant: func(r *http.Request) (string, bool) {
			v, ok := r.Context().Value(tenantKey{}).(string)
			return v, ok
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, s.DB()
}

// auth is authentication middleware: it puts the tenant in the context.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, "acme")))
	})
}

// transfer writes through the transaction it reaches from the context, as
// an oapi-codegen strict-server method does.
func transfer(runs *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		tx, err := idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO transfers (amount) VALUES (1)`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
}

// mountLikeOapiCodegen registers as oapi-codegen's chi server does: each
// route in a Group of its own, below a base URL.
func mountLikeOapiCodegen(r chi.Router, base string, runs *atomic.Int64) {
	r.Group(func(r chi.Router) { r.Post(base+"/transfers", transfer(runs)) })
	r.Group(func(r chi.Router) {
		r.Post(base+"/pets/{id}/photos", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	})
	r.Group(func(r chi.Router) { r.Get(base+"/pets/{id}", func(http.ResponseWriter, *http.Request) {}) })
}

func post(h http.Handler, path, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Routes registered on chi directly fail CheckRoutes per route (nothing
// applies their policy there) and pass behind the middleware, where a
// handler that takes its transaction from the context is watched at run
// time; registered through Router, with no per-route code, both mountings
// pass, and a retry is a replay that wrote once.
func TestRouterPassesCheckRoutes(t *testing.T) {
	e, db := newEngine(t, "/v1")
	var runs atomic.Int64

	plain := chi.NewRouter()
	mountLikeOapiCodegen(plain, "/v1", &runs)
	if err := e.CheckRoutes(idem.PerRoute, idemchi.Lookup(plain)); err == nil || !strings.Contains(err.Error(), "does not apply the policy") {
		t.Fatalf("plain chi per route: CheckRoutes = %v, want the routes refused", err)
	}
	if err := e.CheckRoutes(idem.BehindMiddleware, idemchi.Lookup(plain)); err != nil {
		t.Fatalf("plain chi behind the middleware: CheckRoutes = %v", err)
	}

	r := chi.NewRouter()
	r.Use(auth)
	mountLikeOapiCodegen(idemchi.Router(e, r), "/v1", &runs)
	for _, m := range []idem.Mounting{idem.PerRoute, idem.BehindMiddleware} {
		if err := e.CheckRoutes(m, idemchi.Lookup(r)); err != nil {
			t.Fatalf("mounting %d: %v", m, err)
		}
	}
	post(r, "/v1/transfers", "k")
	if w := post(r, "/v1/transfers", "k"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q, body %s", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM transfers`).Scan(&n); err != nil || n != 1 || runs.Load() != 1 {
		t.Fatalf("%d transfers (%v) from %d runs, want 1 and 1", n, err, runs.Load())
	}
}

// Lookup finds routes under Route, With and Mount as chi would serve
// them, and finds none where chi serves none.
func TestLookupFindsWhatChiServes(t *testing.T) {
	e, _ := newEngine(t, "/api")
	var runs atomic.Int64
	r := chi.NewRouter()
	ir := idemchi.Router(e, r)
	ir.Route("/api", func(api chi.Router) {
		api.With(auth).Post("/transfers", transfer(&runs))
		api.Handle("POST /pets/{id}/photos", http.NotFoundHandler())
	})
	lookup := idemchi.Lookup(r)
	if err := e.CheckRoutes(idem.PerRoute, lookup); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, route string }{
		{http.MethodPost, "/api/transfers", "/api/transfers"},
		{http.MethodPost, "/api/pets/p%2F1/photos", "/api/pets/{id}/photos"},
		{http.MethodGet, "/api/transfers", ""},
		{http.MethodPost, "/transfers", ""},
	} {
		h, route := lookup(httptest.NewRequest(c.method, c.path, nil))
		if route != c.route || (route == "") != (h == nil) {
			t.Errorf("%s %s: route %q (handler %v), want %q", c.method, c.path, route, h != nil, c.route)
		}
	}
}

// chi's r.Use middleware runs after an engine mounted in front of the
// router: the tenant its authentication sets is not there yet, and the
// engine refuses. Authentication that wraps the engine works; so does
// Use with the routes registered through Router.
func TestAuthenticationMustWrapAMountedEngine(t *testing.T) {
	e, _ := newEngine(t, "")
	var runs atomic.Int64
	r := chi.NewRouter()
	r.Use(auth)
	r.Post("/transfers", idem.TxHandler("createTransfer", func(w http.ResponseWriter, req *http.Request, tx *sqlitestore.Tx) {
		transfer(&runs)(w, req)
	}).ServeHTTP)
	if w := post(e.Middleware(r), "/transfers", "k1"); w.Code != http.StatusInternalServerError || runs.Load() != 0 {
		t.Fatalf("engine in front of r.Use(auth): %d after %d runs, want 500 and no run", w.Code, runs.Load())
	}
	if w := post(auth(e.Middleware(r)), "/transfers", "k1"); w.Code != http.StatusCreated {
		t.Fatalf("auth wrapping the engine: %d %s", w.Code, w.Body)
	}
	routed := chi.NewRouter()
	routed.Use(auth)
	idemchi.Router(e, routed).Post("/transfers", transfer(&runs))
	if w := post(routed, "/transfers", "k2"); w.Code != http.StatusCreated {
		t.Fatalf("routes through Router after r.Use(auth): %d %s", w.Code, w.Body)
	}
}
