package idemecho

import (
	"context"
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// Option configures Middleware.
type Option func(*options)

type options struct{ unbound bool }

// UnboundNotExecuted tells Middleware that every protected route marks the
// moment its request reaches its handler: oapi-codegen's strict server
// through StrictMiddleware, a handler of your own by calling Reached once
// it has bound the request. An error the chain returns before that moment
// (a parameter oapi-codegen's wrapper could not bind, a body its strict
// handler could not decode, middleware behind Middleware that refused the
// request) is then answered as not executed (idem.NotExecuted): a 4xx is
// not stored and the key is released, so the client's corrected retry
// with the same key runs.
//
// It is not the default because a route that never marks its handler
// reached would have every 4xx of its own answered so, its key released
// after whatever the handler did outside its transaction (a charge, a
// message), for a retry to do again. Without it, every answer is the
// key's, stored and replayed, a 400 for a body that did not decode
// included, unless the handler calls idem.NotExecuted itself.
func UnboundNotExecuted() Option { return func(o *options) { o.unbound = true } }

// reach records, for one request behind Middleware, whether the request
// reached its handler. An error the chain returns before it did (a
// parameter oapi-codegen's wrapper could not bind, a body that did not
// decode) means the operation did not start executing.
type reach struct{ reached atomic.Bool }

type reachKey struct{}

// withReach returns ctx carrying a fresh reach.
func withReach(ctx context.Context) (context.Context, *reach) {
	r := &reach{}
	return context.WithValue(ctx, reachKey{}, r), r
}

// Reached tells Middleware that the request reached its handler: an error
// the chain returns from now on is the handler's answer, stored as the
// key's like any other, where an error returned before it was (a
// parameter or a body that did not bind) is answered as not executed and
// not stored (under UnboundNotExecuted). StrictMiddleware calls it for an
// oapi-codegen strict server; a handler of your own calls it once it has
// bound the request, before it does anything the key's answer should
// record. Outside Middleware it does nothing.
func Reached(c echo.Context) {
	if r, ok := c.Request().Context().Value(reachKey{}).(*reach); ok {
		r.reached.Store(true)
	}
}

// StrictMiddleware is the strict-server middleware of oapi-codegen's echo
// server that calls Reached before the method runs. oapi-codegen's
// wrapper binds the path, query, header and cookie parameters, and its
// strict handler the body, before the strict middleware run: an error
// returned before StrictMiddleware is one the method never saw. Give it
// to NewStrictHandler, instantiated with the generated package's
// StrictHandlerFunc, so that a parameter the wrapper answers 400 is not
// stored:
//
//	api.NewStrictHandler(impl, []api.StrictMiddlewareFunc{idemecho.StrictMiddleware[api.StrictHandlerFunc]})
//
// oapi-codegen wraps the method in the slice's order, so the last of the
// slice runs first: put StrictMiddleware last, and what strict middleware
// of your own answers after the binding is stored, as the method's
// answer would be.
//
// Under UnboundNotExecuted, without it, Middleware cannot tell the
// method's own error (a 400 it returns) from the wrapper's or the body
// decode's, and answers all of them as not executed.
func StrictMiddleware[H ~func(echo.Context, any) (any, error)](f H, _ string) H {
	return func(c echo.Context, request any) (any, error) {
		Reached(c)
		return f(c, request)
	}
}
