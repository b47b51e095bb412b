// Command orders takes orders whose POSTs are safe to retry: an ogen
// server, SQLite, and the policy idemgen generated from openapi.yaml.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cmp.Or(os.Getenv("DB"), "orders.db"), cmp.Or(os.Getenv("ADDR"), "localhost:8080"), orders{}); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// schema is the service's own table, in the same database as the keys.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY,
	item     TEXT NOT NULL,
	quantity INTEGER NOT NULL
)`

// run serves h until ctx ends. It prints the address it listens on once
// CheckRoutes has passed, so that ADDR may be ":0".
func run(ctx context.Context, path, addr string, h api.Handler) error {
	// This process is the database's only user: after a crash, the next
	// start ends the leases of the requests the crash cut short at once,
	// so their retries run again without waiting the leases out.
	store, err := sqlitestore.Open(ctx, path, sqlitestore.WithDeadHolderRecovery())
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // the key table; safe on every start
		return err
	}
	if _, err := store.DB().ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create the orders table: %w", err)
	}
	handler, err := newHandler(store, h)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println("listening on", ln.Addr())
	srv := &http.Server{Handler: handler}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.WithoutCancel(ctx))
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
