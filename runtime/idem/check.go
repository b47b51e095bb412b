package idem

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// Mounting says how an engine is mounted in front of a router, for
// CheckRoutes.
type Mounting int

const (
	// BehindMiddleware: Engine.Middleware wraps the router.
	BehindMiddleware Mounting = iota + 1
	// PerRoute: every protected route's handler is Engine.Handler (with
	// TxHandler, or a generated transactional adapter, inside it for a
	// transactional operation).
	PerRoute
)

// RouteLookup says which handler and route a router would serve a request
// with, without serving it; route is "" when it serves none.
// (*http.ServeMux).Handler has this shape; for other routers, write a
// small function over their matching API.
type RouteLookup func(r *http.Request) (h http.Handler, route string)

// CheckRoutes reports every protected operation that the router behind
// lookup would not serve with its policy applied: an operation the router
// does not route at all (for a router mounted below a prefix, set
// Config.BasePath and look up through the outer router), one routed to a
// handler that does not apply its policy (PerRoute), one the middleware
// would not recognise, and a transactional operation whose handler is
// known not to take its transaction (Engine.Handler around a plain
// handler). Behind the middleware, a transactional operation's handler
// that the engine does not wrap (an oapi-codegen strict server, an ogen
// server) is taken to reach its transaction through the request's context
// (TxFor, the generated …Tx accessor), as Engine.Route takes it; the
// engine then watches each request, and the first success answered
// without the transaction switches the operation to committing its claims
// before the handler runs (docs/semantics.md §5.3). Call it in a test, or
// at start-up, with the router the server really uses:
//
//	if err := engine.CheckRoutes(idem.BehindMiddleware, mux.Handler); err != nil { … }
//
// It sends no request through the handlers: it only asks the router where
// one sample request per operation would go.
//
// The sample request names no host, so a route that only some hosts reach
// (a ServeMux pattern with a host, "POST legacy.example/transfers", which
// a request to that host meets before "POST /transfers") is looked up
// only when hosts names it: each operation is then looked up once more per
// host, with the request's Host set to it. Give every host a pattern of
// the router names. (engine.ServeMux applies the policy to every pattern
// registered through it, with a host or without.)
//
//	err := engine.CheckRoutes(idem.PerRoute, mux.Handler, "legacy.example")
func (e *Engine) CheckRoutes(m Mounting, lookup RouteLookup, hosts ...string) error {
	if m != BehindMiddleware && m != PerRoute {
		return fmt.Errorf("idem: CheckRoutes: unknown mounting %d", m)
	}
	ids := make([]string, 0, len(e.ops))
	for id := range e.ops {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var errs []error
	for _, id := range ids {
		for _, host := range append([]string{""}, hosts...) {
			if err := e.checkRoute(m, lookup, e.ops[id], host); err != nil {
				errs = append(errs, err)
				break // one report per operation
			}
		}
	}
	return errors.Join(errs...)
}

// checkRoute checks op's route for a request to host ("" for none).
func (e *Engine) checkRoute(m Mounting, lookup RouteLookup, op *operation, host string) error {
	req, err := e.sampleRequest(op)
	if err != nil {
		return err
	}
	req.Host = host
	where := fmt.Sprintf("idem: %s %s%s (%s)", op.Method, host, req.URL.Path, op.OperationID)
	h, route := lookup(req)
	if rr, ok := h.(refusedRoute); ok {
		return fmt.Errorf("%s: %w", where, rr.err)
	}
	if route == "" || h == nil {
		return fmt.Errorf("%s: the router does not route it (is the router mounted below a prefix that Config.BasePath does not name?)", where)
	}
	rh, marked := h.(routeHandler)
	if marked && rh.operationID() != op.OperationID {
		return fmt.Errorf("%s: routed to %s, whose handler applies the policy of operation %s", where, route, rh.operationID())
	}
	switch m {
	case PerRoute:
		if !marked {
			return fmt.Errorf("%s: routed to %s, whose handler does not apply the policy; wrap it with Engine.Handler(%q, …)", where, route, op.OperationID)
		}
	case BehindMiddleware:
		// The sample is escaped as Go spells it: one reading for every
		// router.
		path, _ := pathtemplate.RequestPath(req.URL)
		if rt := e.router.find(req.Method, path); rt.op != op || rt.near {
			return fmt.Errorf("%s: the engine's middleware does not recognise the path (check Config.BasePath)", where)
		}
	}
	if op.Transactional && (m == PerRoute || marked) && !(marked && rh.takesTx()) {
		return fmt.Errorf("%s: the operation is transactional, but %s's handler does not take its transaction; mount the handler with its generated adapter (or idem.TxHandler) so that its writes commit with the key", where, route)
	}
	return nil
}

// sampleRequest is a request that the operation's template matches, with
// a short distinct value for each path parameter.
func (e *Engine) sampleRequest(op *operation) (*http.Request, error) {
	values := make(map[string]string)
	for i, name := range op.template.Params() {
		values[name] = "sample" + strconv.Itoa(i+1)
	}
	path, err := op.template.Expand(values)
	if err != nil {
		return nil, fmt.Errorf("idem: %s: %w", op.OperationID, err)
	}
	if len(e.router.base) > 0 {
		base := make([]string, len(e.router.base))
		for i, s := range e.router.base {
			base[i] = url.PathEscape(s)
		}
		path = "/" + strings.Join(base, "/") + path
	}
	req, err := http.NewRequest(op.Method, path, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("idem: %s: sample request: %w", op.OperationID, err)
	}
	return req, nil
}
