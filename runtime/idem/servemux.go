package idem

import (
	"errors"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Route returns the handler to register on a router for a route of method
// and pattern: h with the policy of the operation the route serves
// applied, as Engine.Handler applies it, or h itself when the route is no
// protected operation's. pattern is the route's path as the router writes
// it, parameters in braces ("/pets/{id}/adoptions"), and names an
// operation when it is the operation's path, alone or below
// Config.BasePath, whatever its parameters are called; method "" (a route
// for every method) names the one operation on that path.
//
// A transactional operation's h that does not take its transaction as an
// argument (idem.TxHandler, a generated adapter) is taken to reach it
// through the request's context: through TxFor or the generated …Tx
// accessor, as an oapi-codegen strict-server method does. CheckRoutes
// accepts such a route. The engine still watches what the handler does:
// one that answers a success without taking its transaction switches the
// operation to committing its claims before the handler runs.
//
// Route is what ServeMux and the chi adapter register through; a router's
// own adapter can call it from its registration methods.
func (e *Engine) Route(method, pattern string, h http.Handler) http.Handler {
	if rh, ok := h.(routeHandler); ok {
		if _, outer := h.(*protected); outer {
			return h
		}
		if op, ok := e.ops[rh.operationID()]; ok && e.routeOp(method, pattern) == op {
			return &protected{e: e, op: op, next: h}
		}
		return h
	}
	op := e.routeOp(method, pattern)
	if op == nil {
		return h
	}
	if op.Transactional {
		h = txInContext{op: op.OperationID, Handler: h}
	}
	return &protected{e: e, op: op, next: h}
}

// routeOp returns the operation a route of method and pattern serves, or
// nil. A route for every method names an operation only when exactly one
// is on its path.
func (e *Engine) routeOp(method, pattern string) *operation {
	return pickMethod(e.opsOnPath(pattern), method)
}

// opsOnPath returns the operations, of any method, whose path a route's
// pattern is, alone or below BasePath.
func (e *Engine) opsOnPath(pattern string) []*operation {
	t, err := pathtemplate.Parse(pattern)
	if err != nil {
		// A router's own syntax (a regular expression, a wildcard) the
		// operation's templates never use.
		return nil
	}
	shape := t.Shape()
	base := ""
	if len(e.router.base) > 0 {
		base = "/" + strings.Join(e.router.base, "/")
	}
	var ops []*operation
	for _, op := range e.ops {
		if s := op.template.Shape(); shape == s || shape == base+s {
			ops = append(ops, op)
		}
	}
	return ops
}

// pickMethod returns the one operation of ops that method names, or nil;
// method "" names the only one.
func pickMethod(ops []*operation, method string) *operation {
	var found *operation
	for _, op := range ops {
		if method != "" && method != op.Method {
			continue
		}
		if found != nil {
			return nil
		}
		found = op
	}
	return found
}

// txInContext is the handler of a transactional operation that reaches
// its transaction through the request's context (TxFor), as oapi-codegen
// strict-server methods do through the generated accessor.
type txInContext struct {
	op string
	http.Handler
}

func (t txInContext) operationID() string { return t.op }
func (t txInContext) takesTx() bool       { return true }

// ServeMux is an http.ServeMux whose routes are registered through
// Engine.Route: a route of a protected operation gets its policy, so the
// mux needs no middleware in front and CheckRoutes passes with PerRoute.
// It has the methods oapi-codegen's std-http server registers with
// (HandleFunc, ServeHTTP), so it can be that server's BaseRouter:
//
//	mux := engine.ServeMux(http.NewServeMux())
//	api.HandlerWithOptions(strict, api.StdHTTPServerOptions{BaseRouter: mux})
//	err := engine.CheckRoutes(idem.PerRoute, mux.Handler)
//
// A pattern net/http cannot parse, such as a segment that mixes a
// parameter with text ("/Accounts/{Sid}.json": ServeMux's wildcards are
// whole segments), is not registered and does not panic: Err reports it,
// the engine logs it, and CheckRoutes fails for a protected operation on
// it, naming the routers that serve it.
type ServeMux struct {
	e       *Engine
	mux     *http.ServeMux
	refused []refusedRoute
}

// ServeMux returns a ServeMux that registers on mux.
func (e *Engine) ServeMux(mux *http.ServeMux) *ServeMux {
	return &ServeMux{e: e, mux: mux}
}

// Handle registers h for pattern, as http.ServeMux.Handle does, with the
// policy of the operation the pattern names applied. A pattern the
// underlying mux cannot parse is refused (see Err) instead of panicking;
// a conflict with a pattern registered before still panics, as
// http.ServeMux.Handle does.
func (m *ServeMux) Handle(pattern string, h http.Handler) {
	method, path := splitPattern(pattern)
	if err := parseOnServeMux(pattern); err != nil {
		m.refuse(method, path, pattern, err)
		return
	}
	m.mux.Handle(pattern, m.e.Route(method, path, h))
}

// HandleFunc registers h for pattern, as Handle does.
func (m *ServeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// ServeHTTP serves r with the underlying mux.
func (m *ServeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.mux.ServeHTTP(w, r) }

// Handler is the underlying mux's Handler; it is CheckRoutes' lookup. A
// request that only a refused pattern would have matched gets that
// refusal, for CheckRoutes to report.
func (m *ServeMux) Handler(r *http.Request) (http.Handler, string) {
	h, route := m.mux.Handler(r)
	if route != "" {
		return h, route
	}
	for _, rr := range m.refused {
		if rr.matches(r) {
			return rr, ""
		}
	}
	return h, route
}

// Err reports every pattern Handle refused, or nil.
func (m *ServeMux) Err() error {
	errs := make([]error, len(m.refused))
	for i, rr := range m.refused {
		errs[i] = rr.err
	}
	return errors.Join(errs...)
}

// splitPattern cuts a ServeMux pattern, "[METHOD ][HOST]/[PATH]", into
// its method and path.
func splitPattern(pattern string) (method, path string) {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method, pattern = pattern[:i], strings.TrimLeft(pattern[i:], " \t")
	}
	if i := strings.IndexByte(pattern, '/'); i > 0 {
		pattern = pattern[i:] // a host
	}
	return method, pattern
}
