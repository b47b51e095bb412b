// Command orders takes orders whose POSTs are safe to retry: an ogen
// server, SQLite, and the policy idemgen generated from openapi.yaml.
package main

import (
	"context"
	"net/http"

	"github.com/idemgen/idemgen/docs/stacks/stackmain"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemogen"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

// docs:begin generate
//go:generate go run github.com/ogen-go/ogen/cmd/ogen@v1.25.0 --config ogen.yml --target api --package api --clean openapi.yaml
//go:generate go tool idemgen generate
// docs:end generate

func main() {
	stackmain.Main("orders", func(ctx context.Context, path, addr string) error {
		return run(ctx, path, addr, orders{})
	})
}

// schema is the service's own table, in the same database as the keys.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY,
	item     TEXT NOT NULL,
	quantity INTEGER NOT NULL
)`

// run serves h on the database at path until ctx ends (stackmain.Serve).
func run(ctx context.Context, path, addr string, h api.Handler) error {
	return stackmain.Serve(ctx, path, addr, schema, func(store *sqlitestore.Store) (http.Handler, error) {
		return newHandler(store, h)
	})
}

// docs:begin mount
// newHandler puts the engine in front of the ogen server of h, and proves with
// CheckRoutes that the server routes every protected operation behind it
// before the service serves a request.
func newHandler(store *sqlitestore.Store, h api.Handler) (http.Handler, error) {
	// One tenant: the service has no accounts of its own. (With tenants,
	// the authentication that sets them wraps the engine; ogen's security
	// handlers run inside the server, after it.)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: idem.SingleTenant("default")})
	if err != nil {
		return nil, err
	}
	server, err := api.NewServer(h,
		api.WithErrorHandler(idemogen.ErrorHandler(nil)), // a body or parameter ogen cannot decode: 400, not stored
	)
	if err != nil {
		return nil, err
	}
	if err := engine.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(server, server.FindPath)); err != nil {
		return nil, err // a protected operation the server does not route never serves
	}
	return engine.Middleware(server), nil
}

// docs:end mount
