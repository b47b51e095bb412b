// Command orders takes orders whose POSTs are safe to retry: an
// oapi-codegen strict server on gin, SQLite, and the policy idemgen
// generated from openapi.yaml.
package main

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/docs/stacks/stackmain"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

// docs:begin generate
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml openapi.yaml
//go:generate go tool idemgen generate
// docs:end generate

func main() {
	gin.SetMode(gin.ReleaseMode)
	stackmain.Main("orders", func(ctx context.Context, path, addr string) error {
		return run(ctx, path, addr, orders{})
	})
}

// schema is the service's own table, in the same database as the keys.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY,
	tenant   TEXT NOT NULL,
	item     TEXT NOT NULL,
	quantity INTEGER NOT NULL
)`

// run serves h on the database at path until ctx ends (stackmain.Serve).
func run(ctx context.Context, path, addr string, h api.StrictServerInterface) error {
	return stackmain.Serve(ctx, path, addr, schema, func(store *sqlitestore.Store) (http.Handler, error) {
		return newHandler(store, h)
	})
}

// docs:begin mount
// newHandler mounts h, the strict server, on gin behind the engine's gin
// middleware, and proves with CheckRoutes that every protected operation
// is routed behind it before the service serves a request.
func newHandler(store *sqlitestore.Store, h api.StrictServerInterface) (http.Handler, error) {
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		return nil, err
	}
	g := gin.New()
	// A strict method gets the *gin.Context as its context; it passes the
	// request's values (the transaction among them) on only with this.
	g.ContextWithFallback = true
	// Authentication sets the tenant, then the engine applies the policy:
	// Use'd before the routes, both run for every route registered below.
	g.Use(authenticate, idemgin.Middleware(engine))
	strict := api.NewStrictHandlerWithOptions(h, nil, api.StrictGinServerOptions{
		RequestErrorHandlerFunc: idemgin.RequestError, // a body that does not decode: 400, not stored
	})
	api.RegisterHandlersWithOptions(g, strict, api.GinServerOptions{
		ErrorHandler: idemgin.ParamError, // a parameter that does not bind: 400, not stored
	})
	if err := idemgin.CheckRoutes(engine, g); err != nil {
		return nil, err // a protected operation gin does not route never serves
	}
	return g, nil
}

// docs:end mount

// docs:begin tenant
type tenantKey struct{}

// authenticate stands in for real authentication: the bearer token is the
// tenant's name. It sets the tenant in the request's context, where
// tenantOf, the engine's Config.Tenant, reads it. It lets CheckRoutes'
// probe through to idemgin.Middleware, which answers it without running
// anything.
func authenticate(c *gin.Context) {
	if idemgin.Probing(c) {
		return
	}
	tenant, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || tenant == "" {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"msg": "unauthenticated"})
		return
	}
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), tenantKey{}, tenant))
}

func tenantOf(r *http.Request) (string, bool) {
	tenant, ok := r.Context().Value(tenantKey{}).(string)
	return tenant, ok
}

// docs:end tenant
