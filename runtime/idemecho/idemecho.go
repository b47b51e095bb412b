// Package idemecho fits the idempotency engine to echo (v4): Middleware
// applies the engine's policies inside echo's middleware chain, after the
// authentication that sets the tenant; StrictMiddleware and Reached tell
// it when a request has reached its handler, so that a request answered
// before (a parameter or a body that did not bind) is not stored; and
// CheckRoutes proves at start-up that echo routes every protected
// operation. It keeps echo out of runtime/idem, which imports the standard
// library only.
//
//	e := echo.New()
//	e.Use(authenticate, idemecho.Middleware(engine, idemecho.UnboundNotExecuted()))
//	api.RegisterHandlers(e, api.NewStrictHandler(impl,
//		[]api.StrictMiddlewareFunc{idemecho.StrictMiddleware[api.StrictHandlerFunc]}))
//	err := idemecho.CheckRoutes(engine, e)
//
// oapi-codegen's echo server binds a request's parameters in its wrapper,
// and its strict handler the body, answering one it cannot bind with
// echo's HTTPError 400 before the strict middleware and the method run.
// With UnboundNotExecuted, Middleware answers an error returned before the
// request reached its handler as not executed: the 400 is not stored, and
// the client's corrected retry with the same key runs. The strict
// server's method is reached through StrictMiddleware, which runs once the
// parameters and the body are bound; an error returned after it (a 400 of
// the method's own) is the key's answer, stored as before. A handler of
// your own (an echo handler, or a method of oapi-codegen's ServerInterface
// without the strict server, which the wrapper calls once the parameters
// are bound) calls Reached once it has bound the request, before it does
// anything the key's answer should record.
//
// Nothing here replaces the Echo's Binder. oapi-codegen's strict server
// binds the value a request validator kept (kin-openapi's openapi3filter
// with KeepValidatedValue), matching member names exactly, only while the
// Echo's Binder is echo's *DefaultBinder; under any other binder it
// decodes the body again, matching names without regard to case, and a
// member the validator never saw ("NOTE" for "note") would reach the
// method unvalidated.
//
// An oapi-codegen strict-server method on echo gets the request's context
// (c.Request().Context()), where the engine put the transaction, so a
// transactional method reaches it through the generated accessor.
package idemecho

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/internal/inuse"
	"github.com/idemgen/idemgen/runtime/internal/routeprobe"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Middleware returns echo middleware that applies e's policies to the
// requests of protected operations, as e.Middleware does for net/http:
// the rest of the chain runs inside the engine, which replays, refuses or
// runs it once. Use it (Echo.Use) after the middleware that authenticates:
// the engine scopes keys to the tenant Config.Tenant reads from the
// request. echo runs Use'd middleware after routing, for every route.
//
// echo has chosen the route when Middleware runs, and its rules are not
// the engine's (a parameter at the root takes the whole path: "/:id"
// serves "/a/b"). A request whose echo route is not the operation the
// engine read from its path (e.RoutedMiddleware) is refused with 500
// route-mismatch, and nothing runs.
//
// An error the chain returns is answered inside the engine, through echo's
// HTTPErrorHandler (Context.Error), so that answer is the one the engine
// stores and replays; the middleware itself then returns nil. With
// UnboundNotExecuted, an error returned before the request reached its
// handler (a parameter or a body that did not bind) is answered as not
// executed (see there). Recover, which answers a panic, is Use'd before
// Middleware, so that a panic reaches the engine as no answer
// (docs/semantics.md §3.4).
//
// A timeout sets a deadline on the request's context (echo's
// middleware.ContextTimeout), in front of Middleware or behind it; the
// handler ends when it sees the deadline, and the engine stores what it
// answered. echo's middleware.Timeout is not used on an Echo that serves
// Middleware, in front of it or behind it: it answers 503 and returns
// while the handler still runs, and echo then gives the request's
// echo.Context, which the handler still holds, to the next request, into
// whose response the late handler writes. A request that reaches
// Middleware through the writer of net/http's TimeoutHandler, which
// echo's Timeout hands on, or through a writer that wraps it and says so
// (Unwrap, as echo's BodyDump and Gzip do), is answered 500 with
// ErrTimeoutHandler and nothing runs, whatever its route; CheckRoutes
// reports it. Whatever else in front returns while the chain runs, a
// request that echo serves with an echo.Context whose earlier request is
// still inside Middleware is answered 500 and runs nothing, so that the
// earlier handler's writes through the Context never reach an answer the
// engine stores; and the writer the engine gave a request drops what is
// written to it once the request's handler has returned. Use Middleware
// once in a chain.
func Middleware(e *idem.Engine, opts ...Option) echo.MiddlewareFunc {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	timeoutWriter := timeoutHandlerWriter()
	// The echo.Responses of the requests inside Middleware: the one echo
	// gave each request's Context and the one Middleware gave it. echo
	// resets a Context's Response in place when it serves another request
	// with the Context, so a request whose Context's Response is held was
	// given a Context another request's handler still holds, whatever
	// wraps the Context.
	var running inuse.Set[*echo.Response]
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if reachedThrough(c.Response().Writer, timeoutWriter) {
				// Nothing runs: a handler that outlived its timeout would
				// write through an echo.Context that echo has given to
				// another request (ErrTimeoutHandler).
				if routeprobe.Reach(c.Request().Context(), c.Path()) {
					routeprobe.Unsafe(c.Request().Context(), ErrTimeoutHandler)
					return nil
				}
				http.Error(c.Response(), ErrTimeoutHandler.Error(), http.StatusInternalServerError)
				return nil
			}
			if routeprobe.Reach(c.Request().Context(), c.Path()) {
				return nil // CheckRoutes' probe: nothing runs
			}
			in, outer := c.Request(), c.Response()
			if !running.Enter(outer) {
				// echo gave this request a Context whose earlier request
				// is still inside Middleware: middleware in front returned
				// while that request's handler runs, and its writes
				// through the Context would land in this request's answer.
				http.Error(outer, errContextInUse.Error(), http.StatusInternalServerError)
				return nil
			}
			defer running.Leave(outer)
			e.RoutedMiddleware(pathtemplate.FromColons(c.Path()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, reach := withReach(r.Context())
				c.SetRequest(r.WithContext(ctx))
				resp := echo.NewResponse(w, c.Echo())
				running.Enter(resp)
				defer running.Leave(resp)
				c.SetResponse(resp)
				if err := next(c); err != nil {
					if o.unbound && !reach.reached.Load() {
						idem.NotExecuted(ctx) // answered before the handler ran
					}
					c.Error(err)
				}
			})).ServeHTTP(outer, in)
			c.SetRequest(in)
			c.SetResponse(outer)
			return nil
		}
	}
}

// errContextInUse answers a request that echo served with an echo.Context
// whose earlier request is still inside Middleware.
var errContextInUse = errors.New("idemecho: echo served this request with an echo.Context whose earlier request's handler still runs inside idemecho.Middleware (middleware in front of it returned before the chain did); nothing was run. Put no middleware that answers while the chain runs in front of idemecho.Middleware")

// ErrTimeoutHandler is the answer, and CheckRoutes' report, for a request
// that reached Middleware through the ResponseWriter of net/http's
// TimeoutHandler, as echo's middleware.Timeout hands it on, or through a
// writer that wraps that one and unwraps to it. On a timeout that
// middleware answers and returns while the rest of the chain still runs,
// and echo puts the request's echo.Context back in its pool: the next
// request is served with it, and the late handler's writes land in
// that request's response, where the engine would store them under that
// request's key and tenant (docs/semantics.md §3.4). Middleware runs
// nothing under it. A TimeoutHandler wrapped around the whole Echo hands
// the same writer on and is refused as well, since Middleware cannot tell
// the two apart.
var ErrTimeoutHandler = errors.New("idemecho: the request reached idemecho.Middleware through http.TimeoutHandler's writer (echo's middleware.Timeout), under which a handler that outlives its timeout writes through an echo.Context echo has given to another request; nothing was run. Set a deadline on the request's context instead (echo's middleware.ContextTimeout)")

// timeoutHandlerWriter returns the type of the ResponseWriter that net/http's
// TimeoutHandler hands its handler, which net/http does not export.
func timeoutHandlerWriter() reflect.Type {
	var t reflect.Type
	h := http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t = reflect.TypeOf(w)
	}), time.Hour, "")
	h.ServeHTTP(headerOnly{}, &http.Request{})
	return t // set before TimeoutHandler returned: it waited for the handler
}

// reachedThrough reports whether w is a ResponseWriter of type t or wraps
// one, as a middleware's writer between echo's Timeout and Middleware
// (echo's BodyDump, Gzip) wraps the one the Timeout hands on: each
// wrapper that says what it wraps (Unwrap, as http.ResponseController
// reads it) is looked through.
func reachedThrough(w http.ResponseWriter, t reflect.Type) bool {
	for w != nil {
		if reflect.TypeOf(w) == t {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
	return false
}

// headerOnly is a ResponseWriter that keeps nothing.
type headerOnly struct{}

func (headerOnly) Header() http.Header         { return http.Header{} }
func (headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (headerOnly) WriteHeader(int)             {}

// CheckRoutes is e.CheckRoutes(idem.BehindMiddleware, …) for an engine
// behind Middleware on ec: it proves that echo routes every protected
// operation (Lookup) through Middleware. It serves one probe per routed
// operation through ec: a request with no body and no key, whose context is already
// cancelled and carries a mark only CheckRoutes sets. Middleware answers a
// probe by recording the route echo chose, and runs nothing else: no
// handler, no store call. CheckRoutes reports every operation echo does
// not route, and every one whose probe never reached Middleware (Use'd on
// a group or a route the operation's is not, or not at all): echo served
// that probe with whatever it routes it to, and serves the operation's
// requests without the engine. Middleware in front of Middleware sees the
// probe; one that would refuse it (authentication) lets it through when
// Probing says it is one. A probe that reaches Middleware through
// net/http's TimeoutHandler (echo's Timeout in front) is reported with
// ErrTimeoutHandler; one that such a timeout answered before it reached
// Middleware is reported as not reaching it. Call it once every route is
// registered. Routes
// of a host (Echo.Host) have a router of their own and are not looked
// into.
func CheckRoutes(e *idem.Engine, ec *echo.Echo) error {
	return routeprobe.Check(e, ec, Lookup(ec), func(r *http.Request, status int) error {
		return fmt.Errorf("idemecho: %s %s: echo answered %d without running idemecho.Middleware: Use it on the Echo (ec.Use), let its probe through the middleware in front of it (Probing), and put no echo Timeout in front of it (use middleware.ContextTimeout)",
			r.Method, r.URL.Path, status)
	})
}

// Probing reports whether ctx is the context of CheckRoutes' probe, which
// Middleware answers without running anything. Middleware in front of
// Middleware that would refuse the probe (authentication without
// credentials) lets it through. No client request carries the mark: only
// CheckRoutes puts it in a context.
func Probing(ctx context.Context) bool { return routeprobe.Is(ctx) }

// Lookup is the route lookup of ec's router, for Engine.CheckRoutes: the
// route echo would serve r with, found without serving it, and ec itself
// as its handler (the engine is echo middleware, in front of every
// route).
func Lookup(ec *echo.Echo) idem.RouteLookup {
	return func(r *http.Request) (http.Handler, string) {
		c := ec.NewContext(r, nil)
		ec.Router().Find(r.Method, echo.GetPath(r), c)
		for _, rt := range ec.Router().Routes() {
			if rt.Method == r.Method && rt.Path == c.Path() {
				return ec, rt.Path
			}
		}
		return nil, "" // no route, or only echo's 404 or 405 answer
	}
}
