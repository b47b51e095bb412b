package idemgin

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/internal/routeprobe"
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
	return routeprobe.Check(e, g, nil, func(r *http.Request, status int) error {
		return fmt.Errorf("idemgin: %s %s: gin answered %d without running idemgin.Middleware: register the route after g.Use(idemgin.Middleware(e)), in a group made after it, and let Middleware's probe through the middleware in front of it (Probing)",
			r.Method, r.URL.Path, status)
	})
}

// Probing reports whether ctx is the context of CheckRoutes' probe, which
// Middleware answers without running anything. Middleware in front of
// Middleware that would refuse the probe (authentication without
// credentials) lets it through. No client request carries the mark: only
// CheckRoutes puts it in a context.
func Probing(ctx context.Context) bool { return routeprobe.Is(ctx) }
