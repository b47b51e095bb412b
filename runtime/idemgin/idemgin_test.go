package idemgin_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

func init() { gin.SetMode(gin.TestMode) }

// authenticate is gin middleware that puts the tenant in the request's
// context, where Config.Tenant reads it.
func authenticate(c *gin.Context) {
	c.Request = adaptertest.WithTenant(c.Request)
}

// strictTransfer is a handler as an oapi-codegen strict server's method
// is: given the *gin.Context as its context, it takes its transaction from
// it. A body of "bad" stands for one the server could not decode.
func strictTransfer(runs *atomic.Int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		var body [8]byte
		n, _ := c.Request.Body.Read(body[:])
		if string(body[:n]) == "bad" {
			idemgin.RequestError(c, errors.New("cannot decode"))
			return
		}
		runs.Add(1)
		tx, err := idem.TxFor[*sqlitestore.Tx](c, adaptertest.Op)
		if err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		// The *gin.Context itself, as a strict method hands it on: gin
		// reuses it for the next request once the handler returns, and
		// the store must not read it after the transaction ended.
		if _, err := tx.ExecContext(c, `INSERT INTO transfers (amount) VALUES (1)`); err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		c.Header("X-Request-Cost", "7")
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	}
}

func newGin(e *idem.Engine, runs *atomic.Int64, fallback bool) *gin.Engine {
	g := gin.New()
	g.ContextWithFallback = fallback
	g.Use(authenticate, idemgin.Middleware(e))
	g.POST("/transfers", strictTransfer(runs))
	g.GET("/transfers", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	return g
}

// Behind the middleware, a strict-style handler finds its transaction in
// the *gin.Context, writes once, and its retry is the same answer replayed
// byte for byte; CheckRoutes passes.
func TestMiddlewareProtectsAGinRoute(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	g := newGin(e, &runs, true)
	if err := idemgin.CheckRoutes(e, g); err != nil {
		t.Fatal(err)
	}
	first := adaptertest.Post(g, "k1", `{}`)
	retry := adaptertest.Post(g, "k1", `{}`)
	if first.Code != http.StatusCreated || retry.Code != http.StatusCreated || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, retry %d replayed=%q; want 201 and a replayed 201", first.Code, retry.Code, retry.Header().Get("Idempotent-Replayed"))
	}
	if first.Body.String() != retry.Body.String() || retry.Header().Get("Content-Type") != first.Header().Get("Content-Type") {
		t.Fatalf("replay %q (%s), first %q (%s)", retry.Body, retry.Header().Get("Content-Type"), first.Body, first.Header().Get("Content-Type"))
	}
	if n := adaptertest.Transfers(t, db); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d transfers from %d runs, want 1 and 1", n, runs.Load())
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/transfers", nil))
	if w.Code != http.StatusNoContent {
		t.Fatalf("an unprotected route: %d, want its own 204", w.Code)
	}
}

// A request gin's server could not decode answers 400 that is not the
// key's answer: the corrected retry with the same key runs.
func TestRequestErrorIsNotStored(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	g := newGin(e, &runs, true)
	if w := adaptertest.Post(g, "k1", `bad`); w.Code != http.StatusBadRequest {
		t.Fatalf("bad body: %d, want 400", w.Code)
	}
	if w := adaptertest.Post(g, "k1", `{}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") == "true" {
		t.Fatalf("corrected retry: %d replayed=%q, want a fresh 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := adaptertest.Transfers(t, db); n != 1 {
		t.Fatalf("%d transfers, want 1", n)
	}
}

// Without ContextWithFallback the handler could not find its transaction
// in the *gin.Context: CheckRoutes says so, and the middleware refuses the
// request before the handler runs instead of letting it write outside the
// key's transaction.
func TestWithoutContextFallbackNothingRuns(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	g := newGin(e, &runs, false)
	if err := idemgin.CheckRoutes(e, g); !errors.Is(err, idemgin.ErrNoContextFallback) {
		t.Fatalf("CheckRoutes = %v, want ErrNoContextFallback", err)
	}
	w := adaptertest.Post(g, "k1", `{}`)
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "ContextWithFallback") {
		t.Fatalf("%d %q, want 500 naming ContextWithFallback", w.Code, w.Body)
	}
	if n := adaptertest.Transfers(t, db); n != 0 || runs.Load() != 0 {
		t.Fatalf("%d transfers from %d runs, want none", n, runs.Load())
	}
}

// CheckRoutes reports a protected operation that gin does not route.
func TestCheckRoutesFindsAMissingRoute(t *testing.T) {
	e, _ := adaptertest.Engine(t)
	g := gin.New()
	g.ContextWithFallback = true
	g.Use(idemgin.Middleware(e))
	g.POST("/other", func(c *gin.Context) {})
	if err := idemgin.CheckRoutes(e, g); err == nil || !strings.Contains(err.Error(), adaptertest.Op) {
		t.Fatalf("CheckRoutes = %v, want createTransfer reported", err)
	}
}

// ServeMuxPath writes gin's parameters and catch-alls as ServeMux's
// wildcards, and leaves the rest of the path alone.
func TestServeMuxPath(t *testing.T) {
	for path, want := range map[string]string{
		"/transfers":                 "/transfers",
		"/transfers/:id":             "/transfers/{id}",
		"/accounts/:acct/notes/:nid": "/accounts/{acct}/notes/{nid}",
		"/files/*rest":               "/files/{rest...}",
		"/a:b/c":                     "/a:b/c",
	} {
		if got := idemgin.ServeMuxPath(path); got != want {
			t.Errorf("ServeMuxPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// CheckRoutes proves each protected route runs Middleware: a route gin
// made before g.Use(idemgin.Middleware) (or in a group made before it)
// runs without the engine, and is reported; the probe that finds it runs
// no handler it reaches Middleware through.
func TestCheckRoutesFindsARouteMadeBeforeTheMiddleware(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(g *gin.Engine, h gin.HandlerFunc, mw ...gin.HandlerFunc)
	}{
		{"route before Use", func(g *gin.Engine, h gin.HandlerFunc, mw ...gin.HandlerFunc) {
			g.POST("/transfers", h)
			g.Use(mw...)
		}},
		{"group made before Use", func(g *gin.Engine, h gin.HandlerFunc, mw ...gin.HandlerFunc) {
			grp := g.Group("/")
			g.Use(mw...)
			grp.POST("/transfers", h)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := adaptertest.Engine(t)
			var runs atomic.Int64
			g := gin.New()
			g.ContextWithFallback = true
			tc.build(g, strictTransfer(&runs), authenticate, idemgin.Middleware(e))
			if err := idemgin.CheckRoutes(e, g); err == nil || !strings.Contains(err.Error(), "without running idemgin.Middleware") {
				t.Fatalf("CheckRoutes = %v, want the route reported", err)
			}
		})
	}
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	if err := idemgin.CheckRoutes(e, newGin(e, &runs, true)); err != nil || runs.Load() != 0 || adaptertest.Transfers(t, db) != 0 {
		t.Fatalf("CheckRoutes = %v after %d runs, want nil and none", err, runs.Load())
	}
}
