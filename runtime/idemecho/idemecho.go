// Package idemecho fits the idempotency engine to echo (v4): Middleware
// applies the engine's policies inside echo's middleware chain, after the
// authentication that sets the tenant; Binder tells the engine when a
// request body could not be decoded, so that answer is not stored; and
// CheckRoutes proves at start-up that echo routes every protected
// operation. It keeps echo out of runtime/idem, which imports the standard
// library only.
//
//	e := echo.New()
//	e.Binder = idemecho.Binder(e.Binder)
//	e.Use(authenticate, idemecho.Middleware(engine))
//	api.RegisterHandlers(e, api.NewStrictHandler(impl, nil))
//	err := idemecho.CheckRoutes(engine, e)
//
// An oapi-codegen strict-server method on echo gets the request's context
// (c.Request().Context()), where the engine put the transaction, so a
// transactional method reaches it through the generated accessor.
package idemecho

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
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
// stores and replays; the middleware itself then returns nil.
func Middleware(e *idem.Engine) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			in, outer := c.Request(), c.Response()
			e.RoutedMiddleware(pathtemplate.FromColons(c.Path()), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(outer, in)
			c.SetRequest(in)
			c.SetResponse(outer)
			return nil
		}
	}
}

// CheckRoutes is e.CheckRoutes(idem.BehindMiddleware, …) for an engine
// behind Middleware on ec: it asks ec's router where each protected
// operation's sample request goes, without serving it, and reports every
// operation ec does not route. Call it once every route is registered.
// Routes of a host (Echo.Host) have a router of their own and are not
// looked into.
func CheckRoutes(e *idem.Engine, ec *echo.Echo) error {
	return e.CheckRoutes(idem.BehindMiddleware, Lookup(ec))
}

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
