// Package idemogen fits the idempotency engine to ogen, whose generated
// Server is one http.Handler with a router of its own: mounted behind
// Engine.Middleware, Lookup is the route lookup Engine.CheckRoutes asks,
// and ErrorHandler tells the engine when ogen answered a request it could
// not decode, so that answer is not stored. It keeps ogen out of
// runtime/idem, which imports the standard library only.
//
//	srv, err := api.NewServer(handler, api.WithErrorHandler(idemogen.ErrorHandler(nil)))
//	err = engine.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(srv, srv.FindPath))
//	http.ListenAndServe(addr, engine.Middleware(srv))
//
// ogen passes each handler method the request's context, so a
// transactional method reaches its transaction through the generated
// accessor (api.CreateOrderTx(ctx)) or idem.TxFor. ogen's security
// handlers run inside its Server, after the engine: a tenant they
// establish is too late for Config.Tenant, so authentication that sets
// the tenant wraps the engine (or the service has one tenant,
// idem.SingleTenant).
package idemogen

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/ogen-go/ogen/ogenerrors"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Route is what Lookup needs of the Route type ogen generates in each
// package: the OpenAPI path it matched.
type Route interface {
	PathPattern() string
}

// Lookup is the route lookup for Engine.CheckRoutes(idem.BehindMiddleware,
// …) of an ogen server mounted behind Engine.Middleware: find is the
// server's FindPath, which matches a request's method and URL as the
// server would serve it (with its WithPathPrefix), without serving it;
// the handler a match routes to is server itself.
//
//	engine.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(srv, srv.FindPath))
func Lookup[R Route](server http.Handler, find func(method string, u *url.URL) (R, bool)) idem.RouteLookup {
	return func(r *http.Request) (http.Handler, string) {
		route, ok := find(r.Method, r.URL)
		if !ok {
			return nil, ""
		}
		return server, route.PathPattern()
	}
}

// ErrorHandler returns h (ogen's ogenerrors.DefaultErrorHandler when h is
// nil), which first tells the engine, for a request ogen refused before
// the handler method ran (a body or parameters it could not decode), that
// the operation did not start executing: its 4xx answer is not stored and
// the key is released, so the client's corrected retry with the same key
// runs (idem.NotExecuted). An error a handler method returned is left
// alone: the method ran, and its answer is the key's. Give it to the
// server as api.WithErrorHandler(idemogen.ErrorHandler(nil)).
func ErrorHandler(h ogenerrors.ErrorHandler) ogenerrors.ErrorHandler {
	if h == nil {
		h = ogenerrors.DefaultErrorHandler
	}
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
		if refused(err) {
			idem.NotExecuted(ctx)
		}
		h(ctx, w, r, err)
	}
}

// refused reports whether err is one of the errors ogen's generated
// server returns before it calls the handler method for a request the
// client must correct. (A security requirement not met is 401, which the
// engine never stores.)
func refused(err error) bool {
	var (
		body   *ogenerrors.DecodeRequestError
		params *ogenerrors.DecodeParamsError
	)
	return errors.As(err, &body) || errors.As(err, &params)
}
