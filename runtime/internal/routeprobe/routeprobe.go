// Package routeprobe is the probe that the router adapters' CheckRoutes
// (idemgin, idemecho) serve through a router to prove that a protected
// operation's route runs the adapter's middleware: a request with no body
// and no key, whose context is already cancelled and carries a mark that
// only this package can set, so that no client request is ever taken for
// one. The middleware answers a probe by recording that it was reached,
// and runs nothing else.
package routeprobe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Check is e.CheckRoutes(idem.BehindMiddleware, …) for an engine behind
// an adapter's middleware on router: it serves one probe per protected
// operation through router, and reports every operation the router does
// not route and, with missing, every one whose probe never reached the
// middleware. The route is the one lookup finds, or with a nil lookup the
// one the middleware saw.
func Check(e *idem.Engine, router http.Handler, lookup idem.RouteLookup, missing func(r *http.Request, status int) error) error {
	var missed []error
	err := e.CheckRoutes(idem.BehindMiddleware, func(r *http.Request) (http.Handler, string) {
		var found string
		if lookup != nil {
			if _, found = lookup(r); found == "" {
				return nil, ""
			}
		}
		reached, route, status, unsafe := Serve(router, r)
		if unsafe != nil {
			missed = append(missed, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, unsafe))
		}
		switch {
		case !reached:
			missed = append(missed, missing(r, status))
			return router, r.URL.Path // reported by missing
		case lookup != nil:
			return router, found
		case route == "":
			return nil, "" // the router's 404 or 405 answer
		}
		return router, route
	})
	return errors.Join(append([]error{err}, missed...)...)
}

// mark records what the middleware saw of a probe. A middleware may reach
// it after Serve returned, from a goroutine that middleware in front
// started (a timeout that answered first), so it is locked.
type mark struct {
	mu      sync.Mutex
	reached bool
	route   string
	unsafe  error
}

type key struct{}

// Serve serves r through h as a probe and reports whether the middleware
// was reached, the route it said the router chose, the status h answered,
// and why the middleware found the way it was reached unsafe, if it did
// (Unsafe).
func Serve(h http.Handler, r *http.Request) (reached bool, route string, status int, unsafe error) {
	m := &mark{}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), key{}, m))
	cancel() // a handler that runs despite all has nothing to work with
	w := &discard{header: http.Header{}, status: http.StatusOK}
	h.ServeHTTP(w, r.WithContext(ctx))
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reached, m.route, w.status, m.unsafe
}

// Reach records, when ctx is a probe's, that the middleware was reached
// for route, and reports whether it was a probe: the middleware then
// answers nothing and runs nothing.
func Reach(ctx context.Context, route string) bool {
	m, ok := ctx.Value(key{}).(*mark)
	if ok {
		m.mu.Lock()
		m.reached, m.route = true, route
		m.mu.Unlock()
	}
	return ok
}

// Unsafe records, when ctx is a probe's, that the middleware was reached
// in a way it refuses to serve requests in (err says which), for Check to
// report.
func Unsafe(ctx context.Context, err error) {
	if m, ok := ctx.Value(key{}).(*mark); ok {
		m.mu.Lock()
		m.unsafe = err
		m.mu.Unlock()
	}
}

// Is reports whether ctx is a probe's.
func Is(ctx context.Context) bool {
	_, ok := ctx.Value(key{}).(*mark)
	return ok
}

// discard is the ResponseWriter of a probe: it keeps the status only.
type discard struct {
	header http.Header
	status int
	wrote  bool
}

func (d *discard) Header() http.Header { return d.header }

func (d *discard) Write(b []byte) (int, error) {
	d.wrote = true
	return len(b), nil
}

func (d *discard) WriteHeader(code int) {
	if !d.wrote {
		d.status, d.wrote = code, true
	}
}
