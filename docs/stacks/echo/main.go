// Command orders takes orders whose POSTs are safe to retry: an
// oapi-codegen strict server on echo, SQLite, and the policy idemgen
// generated from openapi.yaml.
package main

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/docs/stacks/stackmain"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

// docs:begin generate
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml openapi.yaml
//go:generate go tool idemgen generate
// docs:end generate

// docs:begin main
func main() {
	stackmain.Main("orders", func(ctx context.Context, path, addr string) error {
		return run(ctx, path, addr, orders{})
	})
}

// schema is the service's own table, in the same database as the keys.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY,
	tenant   TEXT NOT NULL,
	item     TEXT NOT NULL,
	quantity INTEGER NOT NULL,
	express  INTEGER NOT NULL
)`

// run serves h on the database at path until ctx ends (stackmain.Serve).
func run(ctx context.Context, path, addr string, h api.StrictServerInterface) error {
	return stackmain.Serve(ctx, path, addr, schema, func(store *sqlitestore.Store) (http.Handler, error) {
		return newHandler(store, h)
	})
}

// docs:end main

// docs:begin mount
// newHandler mounts h, the strict server, on echo behind the engine's echo
// middleware, and proves with CheckRoutes that echo routes every protected
// operation before the service serves a request.
func newHandler(store *sqlitestore.Store, h api.StrictServerInterface) (http.Handler, error) {
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// Authentication sets the tenant, then the engine applies the policy;
	// echo runs Use'd middleware after routing, for every route. Every
	// route here is the strict server's, which marks its method reached
	// (StrictMiddleware below), so an error before that is not stored.
	e.Use(authenticate, idemecho.Middleware(engine, idemecho.UnboundNotExecuted()))
	// A parameter or a body that does not bind: the 400 of the wrapper or
	// of the strict handler, answered before StrictMiddleware, not stored;
	// an error the method returns after it is the key's answer. The Echo
	// keeps echo's own binder, under which the strict server binds the
	// value a request validator checked, if one kept it.
	strict := []api.StrictMiddlewareFunc{idemecho.StrictMiddleware[api.StrictHandlerFunc]}
	api.RegisterHandlers(e, api.NewStrictHandler(h, strict))
	if err := idemecho.CheckRoutes(engine, e); err != nil {
		return nil, err // a protected operation echo does not route never serves
	}
	return e, nil
}

// docs:end mount

// docs:begin tenant
type tenantKey struct{}

// authenticate stands in for real authentication: the bearer token is the
// tenant's name. It sets the tenant in the request's context, where
// tenantOf, the engine's Config.Tenant, reads it. It lets CheckRoutes'
// probe through to idemecho.Middleware, which answers it without running
// anything.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if idemecho.Probing(c.Request().Context()) {
			return next(c)
		}
		tenant, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || tenant == "" {
			return echo.NewHTTPError(http.StatusUnauthorized, "unauthenticated")
		}
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), tenantKey{}, tenant)))
		return next(c)
	}
}

func tenantOf(r *http.Request) (string, bool) {
	tenant, ok := r.Context().Value(tenantKey{}).(string)
	return tenant, ok
}

// docs:end tenant
