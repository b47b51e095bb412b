package idem

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/pathtemplate"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Middleware protects every request whose method and path match a policy's
// operation and passes every other request through untouched. It has the
// shape of net/http middleware, so it mounts on http.ServeMux, chi and
// oapi-codegen's Middlewares alike.
//
// Paths are read as net/http's ServeMux reads them: "/%61ccounts" is
// "/accounts". A request whose path is a protected operation's only once
// empty or dot segments are removed ("/orders/", "//orders") is refused
// with a 400 problem, since a router that cleans paths would serve it
// unprotected otherwise; so is, on a method a protected operation takes,
// any request whose path routers read in different ways because its
// request line left raw a character a URL must escape
// (pathtemplate.RequestPath). A router mounted below a prefix needs
// Config.BasePath; Engine.CheckRoutes finds a missing one in a test. A
// path that a route of Config.Unprotected matches more specifically than
// any policy's template is that route's, as the router reads it, and
// passes through.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, ok := pathtemplate.RequestPath(r.URL)
		rt := e.router.find(r.Method, path)
		if !ok && e.refuseUnescaped(w, r, rt.op) {
			return
		}
		e.serveFound(w, r, rt, next)
	})
}

// RoutedMiddleware is Middleware for one request of a router that has
// chosen the request's route before its middleware runs, as gin has:
// pattern is that route's path, parameters in braces as Route takes them,
// or "" when the router routes the request nowhere. When the route is not
// the operation the engine reads from the path (another operation's, an
// unprotected one, none), a decoding or precedence rule of the router's
// own has read the path differently, and the request is refused with 500
// route-mismatch before anything runs: its handler would otherwise run
// under another operation's policy, or under none.
func (e *Engine) RoutedMiddleware(pattern string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, ok := pathtemplate.RequestPath(r.URL)
		rt := e.router.find(r.Method, path)
		if !ok && e.refuseUnescaped(w, r, rt.op) {
			return
		}
		if routed := pickMethod(e.routed.ops(e, pattern), r.Method); routed != rt.op && !rt.near {
			op := rt.op
			if op == nil {
				op = routed
			}
			e.refuseRoute(w, r, op, fmt.Sprintf("the router routed it to %q, which is not the route of the operation the engine read from its path", pattern))
			return
		}
		e.serveFound(w, r, rt, next)
	})
}

// routedOps caches, per route pattern a router reported to
// RoutedMiddleware, the operations on that path, so that a request pays
// for no parse. A router reports its own routes' patterns; past
// maxRoutedPatterns of them a pattern is looked up each time instead.
type routedOps struct {
	mu sync.RWMutex
	m  map[string][]*operation
}

const maxRoutedPatterns = 1 << 12

func (c *routedOps) ops(e *Engine, pattern string) []*operation {
	c.mu.RLock()
	ops, ok := c.m[pattern]
	c.mu.RUnlock()
	if ok {
		return ops
	}
	ops = e.opsOnPath(pattern)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string][]*operation)
	}
	if len(c.m) < maxRoutedPatterns {
		c.m[pattern] = ops
	}
	return ops
}

// serveFound serves r as the router found it: untouched when it is no
// protected operation's, refused when routers could read it two ways.
func (e *Engine) serveFound(w http.ResponseWriter, r *http.Request, rt route, next http.Handler) {
	switch {
	case rt.op == nil:
		next.ServeHTTP(w, r)
	case rt.near:
		e.refusePath(w, r, rt.op)
	default:
		e.serve(w, r, rt.op, rt.params, nil, next)
	}
}

// Handler protects next, the handler of one operation, for routers that
// mount per route. It panics when operationID has no policy: that is a
// wiring mistake to surface at start-up, not a request to serve.
//
// The path parameters that enter the fingerprint are read by matching the
// operation's template against the end of the request path, so any mount
// prefix works. A prefix other than Config.BasePath enters the fingerprint
// as well, since the router may read a resource from it ("/accounts/{id}"
// in front of "/transfers"): one key then never answers for two prefixes.
// A request the template does not match is refused with a 500 problem and
// next never runs: the engine cannot tell which resource it names. Behind Engine.Middleware, a request the middleware already
// protected as this operation passes straight to next; one it protected as
// another operation is refused the same way.
func (e *Engine) Handler(operationID string, next http.Handler) http.Handler {
	op, ok := e.ops[operationID]
	if !ok {
		panic(fmt.Sprintf("idem: no policy for operation %q", operationID))
	}
	return &protected{e: e, op: op, next: next}
}

// protected is the handler Engine.Handler returns; CheckRoutes recognises
// it.
type protected struct {
	e    *Engine
	op   *operation
	next http.Handler
}

func (p *protected) operationID() string { return p.op.OperationID }
func (p *protected) takesTx() bool {
	t, ok := p.next.(routeHandler)
	return ok && t.takesTx() && t.operationID() == p.op.OperationID
}

func (p *protected) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != p.op.Method {
		// A route registered without a method hands this handler every
		// method. Those idempotent by definition pass through; any other
		// ("post", PATCH on a POST operation, an extension method) could
		// reach the operation's effect without its policy.
		if idempotentMethod(r.Method) {
			p.next.ServeHTTP(w, r)
			return
		}
		p.e.refuseMethod(w, r, p.op)
		return
	}
	if a := appliedFrom(r.Context()); a != nil {
		if a.op == p.op {
			p.next.ServeHTTP(w, r)
			return
		}
		p.e.refuseRoute(w, r, p.op, "the engine's middleware protected this request as operation "+a.op.OperationID)
		return
	}
	path, ok := pathtemplate.RequestPath(r.URL)
	if !ok {
		p.e.refuseUnescaped(w, r, p.op)
		return
	}
	segs, _ := pathtemplate.Split(path)
	params, ok := p.op.template.MatchSuffix(segs)
	if !ok {
		p.e.refuseRoute(w, r, p.op, "the path does not match the operation's template "+p.op.Path)
		return
	}
	p.e.serve(w, r, p.op, params, p.e.router.mountPrefix(segs[:len(segs)-p.op.template.Segments()]), p.next)
}

// routeHandler is implemented by the handlers that apply a policy, so that
// CheckRoutes can tell a protected route from an unprotected one.
type routeHandler interface {
	http.Handler
	operationID() string
	// takesTx reports whether the handler hands the operation's
	// transaction to the business handler.
	takesTx() bool
}

// refuseRoute answers a request the engine cannot match to its policy. It
// logs at ERROR: this is a wiring mistake, not a client's.
func (e *Engine) refuseRoute(w http.ResponseWriter, r *http.Request, op *operation, why string) {
	e.log.ErrorContext(r.Context(), "idempotency policy cannot be applied; the request was refused and its handler not run",
		"operation", op.OperationID, "method", r.Method, "path", r.URL.EscapedPath(), "reason", why)
	e.refuse(w, r, op, e.answer(problem.RouteNotApplied))
}

// refuse answers a request of op with p before any of op's policy is
// applied, and reports it to the observer.
func (e *Engine) refuse(w http.ResponseWriter, r *http.Request, op *operation, p Problem) {
	q := &request{op: op, start: time.Now()}
	q.event.Operation = op.OperationID
	e.reject(w, q, p)
	e.observe(r.Context(), q)
}

// idempotentMethod reports whether m is idempotent by definition (RFC 9110
// §9.2.2), so that no policy is needed for it.
func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// refuseMethod answers a request whose method is neither the operation's
// nor idempotent by definition, reaching a per-route Handler.
func (e *Engine) refuseMethod(w http.ResponseWriter, r *http.Request, op *operation) {
	w.Header().Set("Allow", op.Method)
	e.refuse(w, r, op, e.answer(problem.MethodRefused, op.Method, op.OperationID, r.Method))
}

// refuseUnescaped answers, with 400 non-canonical-path, a request whose
// path routers read in different ways (pathtemplate.RequestPath: a
// character a URL must escape left raw, kept as written in RawPath), when
// its method is a protected operation's: chi, echo and gin with
// UseRawPath route on the path as written, the engine cannot, and no
// reading of its own is theirs. found is the operation the engine read
// from the path, for the observer, or nil. It reports whether it
// answered; a request of a method no policy protects passes on.
func (e *Engine) refuseUnescaped(w http.ResponseWriter, r *http.Request, found *operation) bool {
	if !e.router.protects(r.Method) {
		return false
	}
	q := &request{start: time.Now()}
	if found != nil && !found.unprotected {
		q.op, q.event.Operation = found, found.OperationID
	}
	e.reject(w, q, e.answer(problem.PathRawUnescaped))
	e.observe(r.Context(), q)
	return true
}

// refusePath answers a path that a path-cleaning router would serve as a
// protected operation.
func (e *Engine) refusePath(w http.ResponseWriter, r *http.Request, op *operation) {
	e.refuse(w, r, op, e.answer(problem.PathNotCanonical, op.Path))
}
