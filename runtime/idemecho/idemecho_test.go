package idemecho_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// authenticate is echo middleware that puts the tenant in the request's
// context, where Config.Tenant reads it.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.SetRequest(adaptertest.WithTenant(c.Request()))
		return next(c)
	}
}

// transfer is a handler as an oapi-codegen strict server on echo runs
// one: it binds the body, marks itself reached (as StrictMiddleware does
// once the body is bound), then takes its transaction from the request's
// context and writes through it. An amount of 0 writes and then returns
// an error, as a method may.
func transfer(runs *atomic.Int64) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind(&body); err != nil {
			return err
		}
		idemecho.Reached(c)
		runs.Add(1)
		ctx := c.Request().Context()
		tx, err := idem.TxFor[*sqlitestore.Tx](ctx, adaptertest.Op)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO transfers (amount) VALUES (?)`, body.Amount); err != nil {
			return err
		}
		if body.Amount == 0 {
			return echo.NewHTTPError(http.StatusUnprocessableEntity, "an amount of nothing")
		}
		return c.JSON(http.StatusCreated, map[string]bool{"ok": true})
	}
}

func newEcho(e *idem.Engine, runs *atomic.Int64) *echo.Echo {
	ec := echo.New()
	ec.Use(authenticate, idemecho.Middleware(e, idemecho.UnboundNotExecuted()))
	ec.POST("/transfers", transfer(runs))
	ec.GET("/transfers", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	return ec
}

// Behind the middleware, a handler finds its transaction in the request's
// context, writes once, and its retry is the same answer replayed byte for
// byte; CheckRoutes passes, and an unprotected route answers as usual.
func TestMiddlewareProtectsAnEchoRoute(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	ec := newEcho(e, &runs)
	if err := idemecho.CheckRoutes(e, ec); err != nil {
		t.Fatal(err)
	}
	first := adaptertest.Post(ec, "k1", `{"amount": 5}`)
	retry := adaptertest.Post(ec, "k1", `{"amount": 5}`)
	if first.Code != http.StatusCreated || retry.Code != http.StatusCreated || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, retry %d replayed=%q; want 201 and a replayed 201", first.Code, first.Body, retry.Code, retry.Header().Get("Idempotent-Replayed"))
	}
	if first.Body.String() != retry.Body.String() || retry.Header().Get("Content-Type") != first.Header().Get("Content-Type") {
		t.Fatalf("replay %q (%s), first %q (%s)", retry.Body, retry.Header().Get("Content-Type"), first.Body, first.Header().Get("Content-Type"))
	}
	if n := adaptertest.Transfers(t, db); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d transfers from %d runs, want 1 and 1", n, runs.Load())
	}
	w := httptest.NewRecorder()
	ec.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/transfers", nil))
	if w.Code != http.StatusNoContent {
		t.Fatalf("an unprotected route: %d, want its own 204", w.Code)
	}
}

// A body that does not decode is echo's 400, returned before the handler
// marked itself reached, and under UnboundNotExecuted not the key's
// answer: the corrected retry with the same key runs.
func TestBodyThatDoesNotDecodeIsNotStored(t *testing.T) {
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	ec := newEcho(e, &runs)
	for range 2 {
		if w := adaptertest.Post(ec, "k1", `{"amount": "five"}`); w.Code != http.StatusBadRequest || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("bad body: %d replayed=%q, want echo's 400, unstored", w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
	if w := adaptertest.Post(ec, "k1", `{"amount": 5}`); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("corrected retry: %d replayed=%q, want a fresh 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := adaptertest.Transfers(t, db); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d transfers from %d runs, want 1 and 1", n, runs.Load())
	}
}

// An error the handler returns after it ran is answered inside the engine
// by echo's error handler, and that answer is the key's: the retry gets it
// replayed, and the handler does not run again.
func TestHandlerErrorIsTheKeysAnswer(t *testing.T) {
	e, _ := adaptertest.Engine(t)
	var runs atomic.Int64
	ec := newEcho(e, &runs)
	first := adaptertest.Post(ec, "k1", `{"amount": 0}`)
	retry := adaptertest.Post(ec, "k1", `{"amount": 0}`)
	if first.Code != http.StatusUnprocessableEntity || retry.Code != first.Code || retry.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s, retry %d replayed=%q; want 422 and a replayed 422", first.Code, first.Body, retry.Code, retry.Header().Get("Idempotent-Replayed"))
	}
	if first.Body.String() != retry.Body.String() || runs.Load() != 1 {
		t.Fatalf("replay %q, first %q, %d runs; want the same answer from one run", retry.Body, first.Body, runs.Load())
	}
}

// CheckRoutes asks echo's router: a protected operation echo does not
// route, or routes for another method only, is reported.
func TestCheckRoutesFindsAMissingRoute(t *testing.T) {
	e, _ := adaptertest.Engine(t)
	for name, register := range map[string]func(*echo.Echo){
		"another path":   func(ec *echo.Echo) { ec.POST("/other", transfer(new(atomic.Int64))) },
		"another method": func(ec *echo.Echo) { ec.GET("/transfers", transfer(new(atomic.Int64))) },
		"a parameter":    func(ec *echo.Echo) { ec.POST("/transfers/:id", transfer(new(atomic.Int64))) },
	} {
		ec := echo.New()
		ec.Use(idemecho.Middleware(e))
		register(ec)
		if err := idemecho.CheckRoutes(e, ec); err == nil || !strings.Contains(err.Error(), adaptertest.Op) {
			t.Errorf("%s: CheckRoutes = %v, want createTransfer reported", name, err)
		}
	}
}

// CheckRoutes proves each protected route runs Middleware: a route echo
// serves without it (Middleware Use'd on a group the route is not in, or
// on no route at all) is reported, and the probe that proves a route
// runs no handler behind Middleware.
func TestCheckRoutesFindsARouteWithoutTheMiddleware(t *testing.T) {
	for name, build := range map[string]func(ec *echo.Echo, h echo.HandlerFunc, mw echo.MiddlewareFunc){
		"Middleware on another group": func(ec *echo.Echo, h echo.HandlerFunc, mw echo.MiddlewareFunc) {
			ec.Group("/admin", mw)
			ec.POST("/transfers", h)
		},
		"Middleware on another route": func(ec *echo.Echo, h echo.HandlerFunc, mw echo.MiddlewareFunc) {
			ec.POST("/transfers", h)
			ec.POST("/other", h, mw)
		},
	} {
		e, _ := adaptertest.Engine(t)
		ec := echo.New()
		build(ec, transfer(new(atomic.Int64)), idemecho.Middleware(e))
		if err := idemecho.CheckRoutes(e, ec); err == nil || !strings.Contains(err.Error(), "without running idemecho.Middleware") {
			t.Errorf("%s: CheckRoutes = %v, want the route reported", name, err)
		}
	}
	e, db := adaptertest.Engine(t)
	var runs atomic.Int64
	if err := idemecho.CheckRoutes(e, newEcho(e, &runs)); err != nil || runs.Load() != 0 || adaptertest.Transfers(t, db) != 0 {
		t.Fatalf("CheckRoutes = %v after %d runs, want nil and none", err, runs.Load())
	}
}
