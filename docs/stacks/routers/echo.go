package routers

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// docs:begin echo
// EchoRoutes registers routes on an echo server and keeps the handler of
// each: echo wraps it in a handler type of its own (echo.WrapHandler), in
// which a lookup cannot see it.
type EchoRoutes struct {
	Echo     *echo.Echo
	handlers map[string]http.Handler // by "METHOD path"
}

// Handle registers h for method and path.
func (r *EchoRoutes) Handle(method, path string, h http.Handler) {
	if r.handlers == nil {
		r.handlers = map[string]http.Handler{}
	}
	r.handlers[method+" "+path] = h
	r.Echo.Add(method, path, echo.WrapHandler(h))
}

// Lookup is the route lookup for CheckRoutes: echo's router finds the
// route's path without serving the request, and the path names the
// handler.
func (r *EchoRoutes) Lookup(req *http.Request) (http.Handler, string) {
	c := r.Echo.NewContext(req, nil)
	r.Echo.Router().Find(req.Method, echo.GetPath(req), c)
	if h := r.handlers[req.Method+" "+c.Path()]; h != nil {
		return h, c.Path()
	}
	return nil, ""
}

// docs:end echo
