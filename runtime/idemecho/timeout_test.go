package idemecho_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/internal/adaptertest"
)

// echo's Timeout answers 503 and returns while the handler still runs, and
// echo puts the request's echo.Context back in its pool: the next request,
// another tenant's, is served with it, and the late handler would write
// through it into that request's response, which its engine would store
// under its own key and tenant (docs/semantics.md §3.4). Middleware runs
// nothing behind that timeout: every request is answered 500, no handler
// runs, so no handler outlives its request, and CheckRoutes reports it.
func TestEchoTimeoutInFrontRunsNothing(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	var runs atomic.Int64
	newEcho := func() *echo.Echo {
		ec := echo.New()
		ec.Use(middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: time.Minute}))
		ec.Use(idemecho.Middleware(engine))
		ec.POST("/transfers", func(c echo.Context) error {
			runs.Add(1)
			tenant := c.Request().Header.Get("X-Tenant")
			return c.JSON(http.StatusCreated, map[string]string{"tenant": tenant, "card": "4242-" + tenant + "-secret"})
		})
		return ec
	}
	// An Echo of its own: echo's Timeout answers the probe at once (its
	// context is cancelled) and leaves the chain running with a pooled
	// echo.Context, which a request served next would race with.
	if err := idemecho.CheckRoutes(engine, newEcho()); err == nil || !strings.Contains(err.Error(), "ContextTimeout") {
		t.Errorf("CheckRoutes = %v, want echo's Timeout in front reported", err)
	}
	srv := httptest.NewServer(newEcho())
	defer srv.Close()
	for _, tenant := range []string{"a", "b", "a"} {
		status, body := adaptertest.TenantPost(t, srv, tenant, "k-"+tenant)
		if status != http.StatusInternalServerError || !strings.Contains(body, "ContextTimeout") {
			t.Errorf("tenant %s: %d %s, want 500 naming ContextTimeout", tenant, status, body)
		}
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times behind echo's Timeout, want 0", n)
	}
}

// Middleware between echo's Timeout and Middleware that wraps the
// response's writer (echo's BodyDump, Gzip, a middleware that counts
// bytes) hides the writer echo's Timeout hands on; Middleware looks
// through each wrapper that says what it wraps (Unwrap) and still runs
// nothing behind that timeout.
func TestEchoTimeoutBehindAWrappingWriterRunsNothing(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	var runs atomic.Int64
	ec := echo.New()
	ec.Use(middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: time.Minute}))
	ec.Use(middleware.BodyDump(func(echo.Context, []byte, []byte) {}))
	ec.Use(middleware.Gzip())
	ec.Use(idemecho.Middleware(engine))
	ec.POST("/transfers", func(c echo.Context) error {
		runs.Add(1)
		return c.JSON(http.StatusCreated, map[string]string{"tenant": c.Request().Header.Get("X-Tenant")})
	})
	srv := httptest.NewServer(ec)
	defer srv.Close()
	status, body := adaptertest.TenantPost(t, srv, "a", "k-a")
	if status != http.StatusInternalServerError || !strings.Contains(body, "ContextTimeout") {
		t.Errorf("%d %s, want 500 naming ContextTimeout", status, body)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times behind echo's Timeout, want 0", n)
	}
}

// A probe that reaches Middleware through http.TimeoutHandler's writer is
// reported with ErrTimeoutHandler. echo's Timeout in front usually answers
// the probe, whose context is cancelled, before it gets there (reported as
// not reaching Middleware, above); here middleware in front of the
// Timeout takes the cancellation away, so that it waits for the chain.
func TestCheckRoutesReportsTimeoutHandler(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	ec := echo.New()
	ec.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.SetRequest(c.Request().WithContext(context.WithoutCancel(c.Request().Context())))
			return next(c)
		}
	})
	ec.Use(middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: time.Minute}))
	ec.Use(idemecho.Middleware(engine))
	ec.POST("/transfers", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })
	if err := idemecho.CheckRoutes(engine, ec); !errors.Is(err, idemecho.ErrTimeoutHandler) {
		t.Fatalf("CheckRoutes = %v, want ErrTimeoutHandler", err)
	}
}

// The recommended timeout, a deadline on the request's context
// (middleware.ContextTimeout) in front of Middleware, keeps each
// echo.Context with its request until the handler has returned: a handler
// that answers past its deadline answers its own client, its answer is
// what its retry replays, and another tenant's requests meanwhile get
// their own answers. CheckRoutes passes.
func TestEchoContextTimeoutKeepsAnswersApart(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	ec := echo.New()
	ec.Use(middleware.ContextTimeout(50 * time.Millisecond))
	ec.Use(idemecho.Middleware(engine))
	ec.POST("/transfers", func(c echo.Context) error {
		tenant := c.Request().Header.Get("X-Tenant")
		if tenant == "a" {
			<-c.Request().Context().Done() // past its deadline, and answers anyway
		}
		return c.JSON(http.StatusCreated, map[string]string{"tenant": tenant, "card": "4242-" + tenant + "-secret"})
	})
	if err := idemecho.CheckRoutes(engine, ec); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ec)
	defer srv.Close()
	adaptertest.AnswersStayApart(t, srv, "a", "b")
}

// Middleware in front that answers and returns while the chain still runs
// (a timeout written by hand) lets echo serve the next request with the
// echo.Context the running handler holds. That request is answered 500
// and runs nothing, so the running handler's writes through the Context
// never reach an answer the engine stores under another request's key
// and tenant.
func TestEchoContextOfARunningHandlerRunsNothing(t *testing.T) {
	engine := adaptertest.TenantEngine(t)
	var (
		mu      sync.Mutex
		aCtx    echo.Context // the Context tenant a's handler runs with
		started = make(chan struct{})
		release = make(chan struct{})
		aDone   = make(chan struct{})
		once    sync.Once
	)
	ec := echo.New()
	ec.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tenant := c.Request().Header.Get("X-Tenant")
			orig := c.Response().Writer
			buf := httptest.NewRecorder()
			c.Response().Writer = buf // the chain writes here, as under a timeout
			done := make(chan struct{})
			if tenant == "a" {
				mu.Lock()
				aCtx = c
				mu.Unlock()
				done = aDone
			}
			go func() {
				defer close(done)
				_ = next(c)
			}()
			if tenant == "a" { // answer once the handler runs, and return
				<-started
				orig.WriteHeader(http.StatusServiceUnavailable)
				return nil
			}
			<-done
			for k, v := range buf.Header() {
				orig.Header()[k] = v
			}
			orig.WriteHeader(buf.Code)
			_, _ = orig.Write(buf.Body.Bytes())
			return nil
		}
	})
	ec.Use(idemecho.Middleware(engine))
	ec.POST("/transfers", func(c echo.Context) error {
		tenant := c.Request().Header.Get("X-Tenant")
		if tenant == "a" {
			close(started)
			<-release // until another request has the Context, or the test ends
			return c.JSON(http.StatusCreated, map[string]string{"tenant": "a", "card": "4242-a-secret"})
		}
		mu.Lock()
		shared := c == aCtx
		mu.Unlock()
		if shared { // let tenant a's handler write first
			once.Do(func() { close(release) })
			<-aDone
		}
		return c.JSON(http.StatusCreated, map[string]string{"tenant": tenant})
	})
	srv := httptest.NewServer(ec)
	defer srv.Close()
	defer func() { once.Do(func() { close(release) }); <-aDone }()

	if status, _ := adaptertest.TenantPost(t, srv, "a", "a-1"); status != http.StatusServiceUnavailable {
		t.Fatalf("tenant a: %d, want the 503 of the middleware in front", status)
	}
	adaptertest.RefusedWithAnothersContext(t, srv, func() {})
}
