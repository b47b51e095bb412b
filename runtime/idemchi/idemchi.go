// Package idemchi fits the idempotency engine to chi: Router registers
// each protected operation's route with its policy applied, and Lookup is
// the route lookup Engine.CheckRoutes asks. It keeps chi out of
// runtime/idem, which imports the standard library only.
//
// chi's r.Use middleware runs inside the router, after an engine mounted
// in front of it with Engine.Middleware: authentication that sets the
// tenant must then wrap the engine, not be Use'd on the router. Routes
// registered through Router get their policy where chi calls the route's
// handler, after the router's middleware, so there r.Use(auth) comes
// first as usual.
package idemchi

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Router returns r with every route of a protected operation registered
// through e.Route: the route's handler gets the operation's policy, and a
// transactional operation's handler that reaches its transaction through
// the request's context (an oapi-codegen strict-server method, through
// the generated …Tx accessor) passes CheckRoutes. It is the BaseRouter to
// give oapi-codegen's chi server:
//
//	r := chi.NewRouter()
//	api.HandlerWithOptions(strict, api.ChiServerOptions{BaseRouter: idemchi.Router(engine, r)})
//	err := engine.CheckRoutes(idem.PerRoute, idemchi.Lookup(r))
//
// Routes registered through Group, With and Route are protected the same
// way; a handler given to Mount is chi's to route and is not looked into.
func Router(e *idem.Engine, r chi.Router) chi.Router {
	return &router{Router: r, e: e}
}

// router registers through the engine. prefix is the pattern of the
// sub-router it stands for inside the router the engine's paths are
// relative to (Route).
type router struct {
	chi.Router
	e      *idem.Engine
	prefix string
}

func (r *router) wrap(method, pattern string, h http.Handler) http.Handler {
	return r.e.Route(method, r.prefix+pattern, h)
}

func (r *router) sub(c chi.Router, prefix string) *router {
	return &router{Router: c, e: r.e, prefix: prefix}
}

func (r *router) Handle(pattern string, h http.Handler) {
	method, path := cutPattern(pattern)
	r.Router.Handle(pattern, r.wrap(method, path, h))
}

func (r *router) HandleFunc(pattern string, h http.HandlerFunc) { r.Handle(pattern, h) }

func (r *router) Method(method, pattern string, h http.Handler) {
	r.Router.Method(method, pattern, r.wrap(strings.ToUpper(method), pattern, h))
}

func (r *router) MethodFunc(method, pattern string, h http.HandlerFunc) {
	r.Method(method, pattern, h)
}

func (r *router) Post(pattern string, h http.HandlerFunc) {
	r.Method(http.MethodPost, pattern, h)
}

func (r *router) Patch(pattern string, h http.HandlerFunc) {
	r.Method(http.MethodPatch, pattern, h)
}

func (r *router) With(middlewares ...func(http.Handler) http.Handler) chi.Router {
	return r.sub(r.Router.With(middlewares...), r.prefix)
}

func (r *router) Group(fn func(chi.Router)) chi.Router {
	g := r.With()
	if fn != nil {
		fn(g)
	}
	return g
}

func (r *router) Route(pattern string, fn func(chi.Router)) chi.Router {
	sub := r.sub(chi.NewRouter(), r.prefix+strings.TrimSuffix(pattern, "/"))
	if fn != nil {
		fn(sub)
	}
	r.Router.Mount(pattern, sub.Router)
	return sub
}

// cutPattern cuts a chi pattern that names a method ("POST /pets") as
// chi's Handle cuts it: at the first space or tab, the method upper-cased,
// the blanks after it dropped. A pattern without one names no method.
func cutPattern(pattern string) (method, path string) {
	i := strings.IndexAny(pattern, " \t")
	if i < 0 {
		return "", pattern
	}
	return strings.ToUpper(pattern[:i]), strings.TrimLeft(pattern[i+1:], " \t")
}

// Lookup returns the route lookup of r for Engine.CheckRoutes: the
// handler chi would call for a request, and its route pattern, found with
// chi's Find and Walk without serving the request. The handler is the
// route's own, without the middleware chi wraps it in.
func Lookup(r chi.Routes) idem.RouteLookup {
	return func(req *http.Request) (http.Handler, string) {
		path := req.URL.RawPath
		if path == "" {
			path = req.URL.Path
		}
		pattern := r.Find(chi.NewRouteContext(), req.Method, path)
		if pattern == "" {
			return nil, ""
		}
		var found http.Handler
		_ = chi.Walk(r, func(method, route string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
			if method == req.Method && route == pattern {
				found = h
			}
			return nil
		})
		if found == nil {
			return nil, ""
		}
		return found, pattern
	}
}
