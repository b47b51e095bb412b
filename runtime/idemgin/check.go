package idemgin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
)

// CheckRoutes is e.CheckRoutes for an engine behind Middleware on g: it
// refuses g without ContextWithFallback, and proves that each protected
// operation's route runs Middleware. gin gives a route only the
// middleware Use'd before the route (or its group) was made, and cannot
// find a route without serving the request, so CheckRoutes serves one
// probe per operation through g: a request with no body and no key, whose
// context is already cancelled and carries a mark only CheckRoutes sets.
// Middleware answers a probe by recording the route gin chose, and runs
// nothing else: no handler, no store call. CheckRoutes reports every
// operation gin does not route, and every one whose probe never reached
// Middleware: gin served that probe with whatever it routes it to, and
// serves the operation's requests without the engine. Middleware in front
// of Middleware sees the probe; one that would refuse it (authentication)
// lets it through when Probing says it is one. Call CheckRoutes once
// every route is registered.
func CheckRoutes(e *idem.Engine, g *gin.Engine) error {
	if !g.ContextWithFallback {
		return ErrNoContextFallback
	}
	var missed []error
	err := e.CheckRoutes(idem.BehindMiddleware, func(r *http.Request) (http.Handler, string) {
		p, status := send(g, r)
		switch {
		case !p.reached:
			missed = append(missed, fmt.Errorf("idemgin: %s %s: gin answered %d without running idemgin.Middleware: register the route after g.Use(idemgin.Middleware(e)), in a group made after it, and let Middleware's probe through the middleware in front of it (Probing)",
				r.Method, r.URL.Path, status))
			return g, r.URL.Path // reported above
		case p.route == "":
			return nil, "" // gin's 404 or 405 answer
		}
		return g, p.route
	})
	return errors.Join(append([]error{err}, missed...)...)
}

// Probing reports whether ctx is the context of CheckRoutes' probe, which
// Middleware answers without running anything. Middleware in front of
// Middleware that would refuse the probe (authentication without
// credentials) lets it through. No client request carries the mark: only
// CheckRoutes puts it in a context.
func Probing(ctx context.Context) bool {
	_, ok := ctx.Value(probeKey{}).(*probe)
	return ok
}

// probe records what Middleware saw of CheckRoutes' request.
type probe struct {
	reached bool
	route   string // gin's FullPath
}

type probeKey struct{}

// send serves r through g as CheckRoutes' probe and returns what
// Middleware saw of it and the status g answered.
func send(g *gin.Engine, r *http.Request) (*probe, int) {
	p := &probe{}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), probeKey{}, p))
	cancel() // a handler that runs despite all has nothing to work with
	w := &discard{header: http.Header{}, status: http.StatusOK}
	g.ServeHTTP(w, r.WithContext(ctx))
	return p, w.status
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
