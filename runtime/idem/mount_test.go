package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// pathPolicy is a minimal policy at a path, its path parameters in the
// fingerprint.
func pathPolicy(id, path string, params ...string) idem.Policy {
	p := transferPolicy()
	p.OperationID, p.Path = id, path
	p.Fingerprint = fingerprint.Spec{Path: params}
	return p
}

func newEngine(t *testing.T, cfg idem.Config) *idem.Engine {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func post(t *testing.T, h http.Handler, path, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "http://example.test"+path, strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func created(runs *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}
}

// A needlessly percent-encoded literal reaches ServeMux's route, so it must
// not pass the route's policy: before, /%61ccounts ran twice under one key
// and a keyless /%6Frders ran although its key is required. Routers
// disagree on such spellings, so the engine refuses them; a needed escape
// (a non-ASCII literal) is protected.
func TestPercentEncodedPathsMeetTheirPolicy(t *testing.T) {
	var runs atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /accounts", created(&runs))
	mux.Handle("POST /orders", created(&runs))
	mux.Handle("POST /café", created(&runs))
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("createAccount", "/accounts"), pathPolicy("createOrder", "/orders"), pathPolicy("cafe", "/café")}})
	h := e.Middleware(mux)

	for range 2 {
		expect(t, post(t, h, "/%61ccounts", "k1"), http.StatusBadRequest, problem.NonCanonicalPath)
	}
	expect(t, post(t, h, "/%6Frders", ""), http.StatusBadRequest, problem.NonCanonicalPath)
	expect(t, post(t, h, "/caf%c3%a9", ""), http.StatusBadRequest, problem.NonCanonicalPath)
	if runs.Load() != 0 {
		t.Fatalf("the handler ran %d times without its policy", runs.Load())
	}
	expect(t, post(t, h, "/caf%C3%A9", "k2"), http.StatusCreated, "")
	w := post(t, h, "/caf%C3%A9", "k2")
	if w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("second request: %d replayed=%q, handler ran %d times", w.Code, w.Header().Get("Idempotent-Replayed"), runs.Load())
	}
}

// chi's StripSlashes serves /v1/orders/ as /v1/orders: the engine refuses
// such a path instead of letting it through unprotected.
func TestPathCleaningRoutersCannotBypassThePolicy(t *testing.T) {
	var runs atomic.Int64
	r := chi.NewRouter()
	r.Use(middleware.StripSlashes)
	r.Post("/v1/orders", created(&runs))
	e := newEngine(t, idem.Config{BasePath: "/v1", Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	h := e.Middleware(r)
	for _, p := range []string{"/v1/orders/", "/v1//orders", "/v1/./orders", "/v1/x/../orders"} {
		expect(t, post(t, h, p, ""), http.StatusBadRequest, problem.NonCanonicalPath)
	}
	if runs.Load() != 0 {
		t.Fatalf("the handler ran %d times without its policy", runs.Load())
	}
	expect(t, post(t, h, "/v1/orders", "k"), http.StatusCreated, "")
}

// Engine.Handler reads path parameters from the request; before, a failed
// match dropped them from the fingerprint and B got A's answer.
func TestHandlerFingerprintsPathParametersOrRefuses(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("adoptPet", "/pets/{pet_id}/adoptions", "pet_id")}})
	mux := http.NewServeMux()
	mux.Handle("POST /api/pets/{id}/adoptions", e.Handler("adoptPet", created(&runs)))
	mux.Handle("POST /elsewhere", e.Handler("adoptPet", created(&runs)))

	expect(t, post(t, mux, "/api/pets/A/adoptions", "k"), http.StatusCreated, "")
	expect(t, post(t, mux, "/api/pets/B/adoptions", "k"), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, post(t, mux, "/elsewhere", "k2"), http.StatusInternalServerError, problem.RouteMismatch)
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

// Behind the middleware, Handler passes a request protected as its own
// operation straight on, and refuses one protected as another.
func TestHandlerBehindMiddleware(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("a", "/a"), pathPolicy("b", "/b")}})
	mux := http.NewServeMux()
	mux.Handle("POST /a", e.Handler("a", created(&runs)))
	mux.Handle("POST /b", e.Handler("a", created(&runs))) // wired to the wrong operation
	h := e.Middleware(mux)
	expect(t, post(t, h, "/a", "k"), http.StatusCreated, "")
	expect(t, post(t, h, "/a", "k"), http.StatusCreated, "")
	expect(t, post(t, h, "/b", "k"), http.StatusInternalServerError, problem.RouteMismatch)
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (one run, one replay, one refusal)", runs.Load())
	}
}

// Parameters that share a segment with text: before, the engine could not
// be built for {Sid}.json and read {a}-{b} as one parameter.
func TestMixedSegmentTemplates(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{
		pathPolicy("call", "/Accounts/{Sid}/Calls.json", "Sid"),
		pathPolicy("cancel", "/ops/{name}:cancel", "name"),
		pathPolicy("range", "/range/{a}-{b}", "a", "b"),
	}})
	h := e.Middleware(created(&runs))
	expect(t, post(t, h, "/Accounts/AC1/Calls.json", "k1"), http.StatusCreated, "")
	expect(t, post(t, h, "/Accounts/AC2/Calls.json", "k1"), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, post(t, h, "/ops/x:cancel", "k2"), http.StatusCreated, "")
	expect(t, post(t, h, "/ops/y:cancel", "k2"), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, post(t, h, "/range/1-2", "k3"), http.StatusCreated, "")
	expect(t, post(t, h, "/range/1-3", "k3"), http.StatusUnprocessableEntity, problem.KeyReused)
	// No router gives {b} an empty value at the end of the path (chi
	// serves it with another route, or none), but a handler that cuts a
	// "{span}" itself might: refused, and nothing runs.
	expect(t, post(t, h, "/range/12-", "k4"), http.StatusBadRequest, problem.NonCanonicalPath)
	if runs.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", runs.Load())
	}
}

func TestNewRefusesOverlappingTemplates(t *testing.T) {
	_, err := idem.New(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "t", true },
		Policies: []idem.Policy{pathPolicy("a", "/pets/{id}", "id"), pathPolicy("b", "/pets/{name}", "name")}})
	if err == nil || !strings.Contains(err.Error(), "match the same requests") {
		t.Fatalf("New = %v, want an overlap error", err)
	}
	_, err = idem.New(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "t", true },
		Policies: []idem.Policy{pathPolicy("a", "/pets/{id}")}})
	if err == nil || !strings.Contains(err.Error(), "fingerprint.Path") {
		t.Fatalf("New = %v, want a refusal of a fingerprint without the path parameter", err)
	}
}

func TestCheckRoutes(t *testing.T) {
	tx := pathPolicy("pay", "/pay")
	tx.Transactional, tx.OnLeaseExpiry = true, idemstore.Takeover
	policies := []idem.Policy{pathPolicy("a", "/a/{id}", "id"), tx}
	store := &txStore{memstore.New()}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	txh := idem.TxHandler("pay", func(http.ResponseWriter, *http.Request, string) {})

	t.Run("middleware, all wired", func(t *testing.T) {
		e := newEngine(t, idem.Config{Store: store, Policies: policies})
		mux := http.NewServeMux()
		mux.Handle("POST /a/{x}", noop)
		mux.Handle("POST /pay", txh)
		if err := e.CheckRoutes(idem.BehindMiddleware, mux.Handler); err != nil {
			t.Fatal(err)
		}
		if err := e.CheckRoutes(idem.PerRoute, mux.Handler); err == nil || !strings.Contains(err.Error(), "wrap it with Engine.Handler(\"a\"") {
			t.Fatalf("PerRoute with an unwrapped handler: %v", err)
		}
	})
	t.Run("per route, all wired", func(t *testing.T) {
		e := newEngine(t, idem.Config{Store: store, Policies: policies})
		mux := http.NewServeMux()
		mux.Handle("POST /a/{x}", e.Handler("a", noop))
		mux.Handle("POST /pay", e.Handler("pay", txh))
		if err := e.CheckRoutes(idem.PerRoute, mux.Handler); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("transactional handler known not to take its transaction", func(t *testing.T) {
		e := newEngine(t, idem.Config{Store: store, Policies: policies})
		mux := http.NewServeMux()
		mux.Handle("POST /a/{x}", noop)
		mux.Handle("POST /pay", e.Handler("pay", noop))
		for _, m := range []idem.Mounting{idem.BehindMiddleware, idem.PerRoute} {
			err := e.CheckRoutes(m, mux.Handler)
			if err == nil || !strings.Contains(err.Error(), "does not take its transaction") {
				t.Fatalf("mounting %d: got %v", m, err)
			}
		}
	})
	t.Run("transactional handler that reaches its transaction through the context, behind the middleware", func(t *testing.T) {
		// A strict server or an ogen server is one handler the engine does
		// not wrap: behind the middleware it is taken to use TxFor, as
		// Engine.Route takes it, and watched at run time (docs/semantics.md §5.3).
		e := newEngine(t, idem.Config{Store: store, Policies: policies})
		mux := http.NewServeMux()
		mux.Handle("POST /a/{x}", noop)
		mux.Handle("POST /pay", noop)
		if err := e.CheckRoutes(idem.BehindMiddleware, mux.Handler); err != nil {
			t.Fatalf("behind the middleware: %v", err)
		}
		if err := e.CheckRoutes(idem.PerRoute, mux.Handler); err == nil {
			t.Fatal("per route, an unwrapped handler passed")
		}
	})
	t.Run("not routed, base path missing", func(t *testing.T) {
		e := newEngine(t, idem.Config{Store: store, Policies: policies})
		mux := http.NewServeMux()
		mux.Handle("POST /v1/a/{x}", noop)
		mux.Handle("POST /v1/pay", txh)
		err := e.CheckRoutes(idem.BehindMiddleware, mux.Handler)
		if err == nil || !strings.Contains(err.Error(), "does not route it") {
			t.Fatalf("got %v", err)
		}
		e = newEngine(t, idem.Config{Store: store, Policies: policies, BasePath: "/v1"})
		if err := e.CheckRoutes(idem.BehindMiddleware, mux.Handler); err != nil {
			t.Fatal(err)
		}
	})
}

// txStore gives memstore transactions whose driver is a string: enough for
// the engine's wiring, with nothing to commit.
type txStore struct{ *memstore.Store }

func (s *txStore) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	res, err := s.Claim(ctx, c)
	if err != nil || !res.Won {
		return res, nil, err
	}
	return res, &memTx{s: s.Store, c: &c}, nil
}

func (s *txStore) Begin(context.Context, time.Duration) (idemstore.Tx, error) {
	return &memTx{s: s.Store}, nil
}

type memTx struct {
	s *memstore.Store
	c *idemstore.Claim
}

func (t *memTx) Driver() any { return "tx" }
func (t *memTx) Commit(ctx context.Context, resp idemstore.Response) error {
	if t.c == nil {
		return nil
	}
	return t.s.Complete(ctx, t.c.Identity, t.c.Token, resp)
}
func (t *memTx) Rollback(ctx context.Context) error {
	if t.c == nil {
		return nil
	}
	return t.s.Release(ctx, t.c.Identity, t.c.Token)
}

// A route registered without a method hands Engine.Handler every method:
// before, "post", PATCH or an extension method reached the create handler
// without its policy. Methods idempotent by definition still pass.
func TestHandlerRefusesOtherUnsafeMethods(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	h := e.Handler("createOrder", created(&runs))
	for _, m := range []string{"post", http.MethodPatch, "PURGE"} {
		r := httptest.NewRequest(m, "/orders", strings.NewReader(`{}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		expect(t, w, http.StatusMethodNotAllowed, problem.MethodNotAllowed)
		if got := w.Header().Get("Allow"); got != http.MethodPost {
			t.Errorf("%s: Allow %q, want POST", m, got)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("the handler ran %d times for methods outside its policy", runs.Load())
	}
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(m, "/orders", nil))
	}
	if runs.Load() != 3 {
		t.Fatalf("idempotent methods ran %d times, want 3 (they pass through)", runs.Load())
	}
}

// TestUnprotectedRoutePassesThrough: POST /pay/batch has no policy beside
// a protected POST /pay/{id}, and ServeMux sends /pay/batch to its own
// handler. Before Config.Unprotected the engine read /pay/batch as
// capture's: a keyless batch was refused for a missing key, and a second
// batch under the same key was answered with the first one's replay and
// never ran.
func TestUnprotectedRoutePassesThrough(t *testing.T) {
	var captures, batches atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /pay/{id}", created(&captures))
	mux.Handle("POST /pay/batch", created(&batches))
	store := memstore.New()
	e := newEngine(t, idem.Config{Store: store, Policies: []idem.Policy{pathPolicy("capture", "/pay/{id}", "id")},
		Unprotected: []idem.Route{{Method: http.MethodPost, Path: "/pay/batch", OperationID: "batch"}}})
	h := e.Middleware(mux)
	expect(t, post(t, h, "/pay/batch", ""), http.StatusCreated, "")
	expect(t, post(t, h, "/pay/batch", "k1"), http.StatusCreated, "")
	if w := post(t, h, "/pay/batch", "k1"); w.Code != http.StatusCreated || w.Header().Get(problem.ReplayedHeader) != "" {
		t.Fatalf("the second batch under one key: status %d, %s %q; want it run", w.Code, problem.ReplayedHeader, w.Header().Get(problem.ReplayedHeader))
	}
	if batches.Load() != 3 || store.Len() != 0 {
		t.Fatalf("batch ran %d times, want 3; %d keys stored, want none", batches.Load(), store.Len())
	}
	// capture keeps its policy.
	expect(t, post(t, h, "/pay/p1", ""), http.StatusBadRequest, problem.MissingKey)
	expect(t, post(t, h, "/pay/p1", "k1"), http.StatusCreated, "")
	expect(t, post(t, h, "/pay/p1", "k1"), http.StatusCreated, "")
	if captures.Load() != 1 {
		t.Fatalf("capture ran %d times, want 1", captures.Load())
	}
}

// TestNewRefusesAnUnprotectedRouteNoMoreSpecific: an unprotected route that
// matches a protected one's requests with neither more specific would
// leave it to the router's accident which handler, and which policy, a
// request meets.
func TestNewRefusesAnUnprotectedRouteNoMoreSpecific(t *testing.T) {
	for _, path := range []string{"/pay/{other}", "/pay/{x}/b"} {
		_, err := idem.New(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "t", true },
			Policies:    []idem.Policy{pathPolicy("capture", "/pay/{id}", "id"), pathPolicy("deep", "/pay/a/{y}", "y")},
			Unprotected: []idem.Route{{Method: http.MethodPost, Path: path, OperationID: "other"}}})
		if err == nil || !strings.Contains(err.Error(), "match the same requests") {
			t.Errorf("unprotected %s: New = %v, want an overlap error", path, err)
		}
	}
}
