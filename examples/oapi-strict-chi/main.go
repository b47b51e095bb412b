// Command oapi-strict-chi is an order service built the way many Go teams
// build one: an oapi-codegen strict server on chi, PostgreSQL through pgx.
// idemgen protects its POSTs with no hand-written route: the strict
// server's routes are registered through idemchi.Router, decode errors go
// through the generated StrictRequestError, and CheckRoutes proves the
// wiring at start-up. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/oapi-strict-chi/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// docs:begin generate
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml openapi.yaml
//go:generate go tool idemgen generate --config idemgen.yaml
// docs:end generate
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.stdhttp.yaml openapi.yaml
//go:generate go tool idemgen generate --config idemgen.stdhttp.yaml

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL"), os.Getenv("ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "oapi-strict-chi:", err)
		os.Exit(1)
	}
}

// schema is the service's own table; pgstore.Migrate creates the keys'.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       bigserial PRIMARY KEY,
	tenant   text NOT NULL,
	item     text NOT NULL,
	quantity integer NOT NULL,
	notes    text[] NOT NULL DEFAULT '{}'
)`

// run serves until ctx ends. It prints the address it listens on, so that
// ADDR may be ":0".
func run(ctx context.Context, databaseURL, addr string) error {
	if databaseURL == "" {
		return errors.New("DATABASE_URL is not set; set it to a postgres:// URL")
	}
	if addr == "" {
		addr = "localhost:8080"
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the orders table: %w", err)
	}
	engine, err := api.NewEngine(idem.Config{Store: pgstore.New(pool), Tenant: tenantOf})
	if err != nil {
		return err
	}
	handler, err := newHandler(engine, pool)
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
// newHandler mounts the strict server on chi with every protected route
// registered through the engine, and proves it with CheckRoutes: a route
// that would run without its policy, or a transactional one without its
// transaction, stops the service before it serves a request.
func newHandler(engine *idem.Engine, pool *pgxpool.Pool) (http.Handler, error) {
	r := chi.NewRouter()
	// Authentication sets the tenant. Use'd here it runs before each
	// route's policy, since the routes below get theirs from
	// idemchi.Router; an engine mounted in front of r instead
	// (engine.Middleware(r)) would run before it, and then authentication
	// must wrap the engine.
	r.Use(authenticate)
	strict := api.NewStrictHandlerWithOptions(&orders{pool: pool}, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: api.StrictRequestError, // a body that does not decode: 400, not stored
	})
	api.HandlerWithOptions(strict, api.ChiServerOptions{
		BaseRouter:       idemchi.Router(engine, r),
		ErrorHandlerFunc: api.StrictRequestError, // a parameter that does not bind: 400, not stored
	})
	if err := engine.CheckRoutes(idem.PerRoute, idemchi.Lookup(r)); err != nil {
		return nil, err
	}
	return r, nil
}

// docs:end mount

type tenantKey struct{}

// authenticate stands in for real authentication: the bearer token is the
// tenant's name.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tenant == "" {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func tenantOf(r *http.Request) (string, bool) {
	t, ok := r.Context().Value(tenantKey{}).(string)
	return t, ok
}
