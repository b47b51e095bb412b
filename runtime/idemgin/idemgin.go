// Package idemgin fits the idempotency engine to gin: Middleware applies
// the engine's policies inside gin's middleware chain, after the
// authentication that sets the tenant, and CheckRoutes proves at start-up
// that every protected operation is routed behind it. It keeps gin out of
// runtime/idem, which imports the standard library only.
//
//	g := gin.New()
//	g.ContextWithFallback = true // handlers read the transaction from c
//	g.Use(authenticate, idemgin.Middleware(engine))
//	api.RegisterHandlersWithOptions(g, api.NewStrictHandlerWithOptions(impl, nil,
//		api.StrictGinServerOptions{RequestErrorHandlerFunc: idemgin.RequestError}), api.GinServerOptions{})
//	err := idemgin.CheckRoutes(engine, g)
//
// A handler that takes its transaction from the context it is given (an
// oapi-codegen strict-server method gets the *gin.Context) finds it only
// when gin's Engine.ContextWithFallback is true: gin's Context passes the
// request's values on only then. CheckRoutes refuses an engine without
// it, and Middleware refuses its requests (500, the handler not run).
//
// gin reuses the *gin.Context for the next request once the handler
// returns. A handler hands it only to calls that are over by then (the
// stores' statements are: a transaction ends, inside the engine, what it
// made from a statement's context); anything that outlives the handler
// takes the request's own context, c.Request.Context().
package idemgin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/internal/inuse"
	"github.com/idemgen/idemgen/runtime/internal/routeprobe"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// ErrNoContextFallback is the error of a gin engine whose Context does not
// pass the request's values on (ContextWithFallback is false).
var ErrNoContextFallback = errors.New("idemgin: gin.Engine.ContextWithFallback is false, so a handler given the *gin.Context cannot find the idempotency transaction or the engine's marks in it; set it to true")

// Middleware returns gin middleware that applies e's policies to the
// requests of protected operations, as e.Middleware does for net/http:
// the route's handlers run inside the engine, which replays, refuses or
// runs them once. Use it after the middleware that authenticates (the
// engine scopes keys to the tenant Config.Tenant reads from the request),
// and before registering the routes it protects: gin gives a route only
// the middleware Use'd before it.
//
// gin has chosen the route when Middleware runs, reading the decoded path
// (Engine.UseRawPath false), where the engine reads the path segment by
// segment as ServeMux does. A request whose gin route is not the
// operation the engine read (e.RoutedMiddleware) is refused with 500
// route-mismatch, and nothing runs.
//
// The engine fingerprints the body the handler binds. Middleware in front
// that read it with c.ShouldBindBodyWith (a signature check, an audit log)
// leaves the request's body drained and the bytes in the Context
// (gin.BodyBytesKey): Middleware gives those bytes back to the request
// before the engine reads them.
//
// The key's answer is what the route's handlers write inside the engine.
// A handler that returns having chosen no status and written nothing gave
// no answer (docs/semantics.md §3.4), whatever gin would default to: the
// engine answers 500 handler-failed and stores nothing. So middleware that
// renders c.Errors as a response is Use'd after Middleware, where its
// answer is the key's, stored and replayed; Use'd before it, it writes
// after the engine has answered. A recovery, which answers a panic, is
// Use'd before Middleware (docs/semantics.md §3.4).
//
// A timeout is a deadline on the request's context, which the handler
// obeys: middleware that answers and returns while the chain still runs
// (gin-contrib's timeout, or one that runs c.Next in a goroutine and
// answers when a timer fires first) is used neither before Middleware nor
// after it, since gin hands a *gin.Context it has got back to the next
// request, and a late handler's writes through it would land in that
// request's answer. A request that gin serves with a Context whose
// earlier request is still inside Middleware is answered 500 and runs
// nothing, so that the earlier handler's writes through the Context never
// reach an answer the engine stores under another request's key; and the
// writer the engine gave a request drops what is written to it once the
// request's handler has returned. Use Middleware once in a chain.
func Middleware(e *idem.Engine) gin.HandlerFunc {
	// The gin.Contexts of the requests inside Middleware.
	var running inuse.Set[*gin.Context]
	return func(c *gin.Context) {
		if routeprobe.Reach(c.Request.Context(), c.FullPath()) {
			c.Abort() // CheckRoutes' probe: nothing runs
			return
		}
		if !running.Enter(c) {
			// gin served this request with a Context whose earlier
			// request is still inside Middleware: middleware in front
			// returned while that request's handler runs, and its writes
			// through the Context would land in this request's answer.
			http.Error(c.Writer, errContextInUse.Error(), http.StatusInternalServerError)
			c.Abort()
			return
		}
		defer running.Leave(c)
		boundBody(c)
		outer := c.Writer
		e.RoutedMiddleware(ServeMuxPath(c.FullPath()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r.WithContext(context.WithValue(r.Context(), fallbackKey{}, true))
			if c.Value(fallbackKey{}) == nil {
				// The handler could not reach its transaction: refuse
				// before it runs rather than let it write outside it.
				idem.NotExecuted(r.Context())
				http.Error(w, ErrNoContextFallback.Error(), http.StatusInternalServerError)
				return
			}
			gw := &writer{ResponseWriter: w, status: http.StatusOK}
			c.Writer = gw
			c.Next()
			if gw.answered() {
				gw.WriteHeaderNow()
			}
			// A chain that chose no status and wrote nothing (a handler
			// that only called c.Error, for middleware in front to render)
			// gave no answer: the engine answers 500 handler-failed,
			// stores nothing and rolls the transaction back, where gin's
			// default 200 would have been stored and replayed.
		})).ServeHTTP(outer, c.Request)
		c.Writer = outer
		// The rest of the chain ran inside the engine, or must not run at
		// all (a replay, a 409, a refusal): gin is not to run it again.
		c.Abort()
	}
}

// errContextInUse answers a request that gin served with a *gin.Context
// whose earlier request is still inside Middleware.
var errContextInUse = errors.New("idemgin: gin served this request with a *gin.Context whose earlier request's handler still runs inside idemgin.Middleware (middleware in front of it returned before the chain did); nothing was run. Put no middleware that answers while the chain runs in front of idemgin.Middleware")

// fallbackKey marks the request's context, to see whether gin's Context
// passes the request's values on.
type fallbackKey struct{}

// RequestError answers a request that oapi-codegen's gin server could not
// decode or bind with 400 and err's text, as oapi-codegen's default does,
// and tells the engine the operation did not start executing: the answer
// is not stored and the key is released, so the client's corrected retry
// with the same key runs. Give it as StrictGinServerOptions'
// RequestErrorHandlerFunc; ParamError is the same for GinServerOptions'
// ErrorHandler.
func RequestError(c *gin.Context, err error) {
	idem.NotExecuted(c.Request.Context())
	c.JSON(http.StatusBadRequest, gin.H{"msg": err.Error()})
}

// ParamError is RequestError with the status oapi-codegen's gin server
// chose, for GinServerOptions' ErrorHandler (a parameter that does not
// bind). A status of 500 or more is answered without the mark: it is no
// client's mistake.
func ParamError(c *gin.Context, err error, status int) {
	if status < http.StatusInternalServerError {
		idem.NotExecuted(c.Request.Context())
	}
	c.JSON(status, gin.H{"msg": err.Error()})
}

// ServeMuxPath writes the path of a gin route as net/http's ServeMux
// writes a pattern's: gin's ":id" as "{id}" and its "*rest" as
// "{rest...}". A ServeMux of the routes stands in for gin where a route
// must be found without serving the request, as CheckRoutes does.
func ServeMuxPath(path string) string { return pathtemplate.FromColons(path) }

// boundBody gives a request the body that middleware in front bound with
// ShouldBindBodyWith back before the engine reads it. gin keeps the bytes
// in the Context (gin.BodyBytesKey), where every later binder reads them,
// and leaves the request's body drained: the engine would fingerprint an
// empty body while the handler binds the body the client sent.
func boundBody(c *gin.Context) {
	v, ok := c.Get(gin.BodyBytesKey)
	if !ok {
		return
	}
	b, ok := v.([]byte)
	if !ok {
		return
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(b))
	c.Request.ContentLength = int64(len(b))
}
