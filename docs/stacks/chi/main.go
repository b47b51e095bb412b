// docs:begin main

// Command shop takes orders whose POSTs are safe to retry: chi, SQLite,
// and the policy idemgen generated from openapi.yaml.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/shop/api"
)

//go:generate go tool idemgen generate

func main() {
	if err := run(context.Background(), cmp.Or(os.Getenv("ADDR"), "localhost:8080")); err != nil {
		fmt.Fprintln(os.Stderr, "shop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string) error {
	store, err := sqlitestore.Open(ctx, "shop.db")
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil { // the key table; safe on every start
		return err
	}
	if _, err := store.DB().ExecContext(ctx, schema); err != nil {
		return err
	}
	handler, err := newHandler(store)
	if err != nil {
		return err
	}
	fmt.Println("listening on", addr)
	return http.ListenAndServe(addr, handler)
}

// schema is the shop's own table, in the same database as the keys.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY,
	tenant   TEXT NOT NULL,
	item     TEXT NOT NULL,
	quantity INTEGER NOT NULL
)`

// docs:end main

// docs:begin mount
// newHandler registers every route through the engine (idemchi.Router) and
// proves, before serving, that each protected operation reaches its policy.
func newHandler(store *sqlitestore.Store) (http.Handler, error) {
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	r.Use(authenticate) // runs before each route's policy: the routes below get theirs from idemchi.Router
	idemchi.Router(engine, r).Method(http.MethodPost, "/orders", api.CreateOrder(createOrder))
	if err := engine.CheckRoutes(idem.PerRoute, idemchi.Lookup(r)); err != nil {
		return nil, err // a route without its policy never serves
	}
	return r, nil
}

// docs:end mount

// docs:begin handler
// createOrder inserts through tx: the order commits together with the
// idempotency key, or neither does.
func createOrder(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
	var order struct {
		ID       int64  `json:"id"`
		Item     string `json:"item"`
		Quantity int    `json:"quantity"`
	}
	if err := json.NewDecoder(r.Body).Decode(&order); err != nil {
		idem.NotExecuted(r.Context()) // a 400 that is not stored: the corrected retry runs
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tenant, _ := tenantOf(r)
	err := tx.QueryRowContext(r.Context(),
		`INSERT INTO orders (tenant, item, quantity) VALUES (?, ?, ?) RETURNING id`,
		tenant, order.Item, order.Quantity).Scan(&order.ID)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(order)
}

// docs:end handler

// docs:begin tenant
type tenantKey struct{}

// authenticate stands in for real authentication: the bearer token is the
// tenant's name. The engine scopes every key to the tenant it sets.
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
	tenant, ok := r.Context().Value(tenantKey{}).(string)
	return tenant, ok
}

// docs:end tenant
