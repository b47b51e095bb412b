package stdhttp_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/oapi-strict-chi/stdhttp"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// orders writes each order through the transaction it reaches with the
// generated accessor.
type orders struct{ runs int }

func (o *orders) CreateOrder(ctx context.Context, req stdhttp.CreateOrderRequestObject) (stdhttp.CreateOrderResponseObject, error) {
	o.runs++
	if req.Body.Quantity > 100 {
		return stdhttp.CreateOrder422JSONResponse{Message: "out of stock"}, nil
	}
	tx, err := stdhttp.CreateOrderTx(ctx)
	if err != nil {
		return nil, err
	}
	resp := stdhttp.CreateOrder201JSONResponse{Item: req.Body.Item, Quantity: req.Body.Quantity}
	err = tx.QueryRow(ctx, `INSERT INTO orders (item, quantity) VALUES ($1, $2) RETURNING id`, req.Body.Item, req.Body.Quantity).Scan(&resp.Id)
	return resp, err
}

func (o *orders) AddNote(ctx context.Context, req stdhttp.AddNoteRequestObject) (stdhttp.AddNoteResponseObject, error) {
	return stdhttp.AddNote201JSONResponse{OrderId: req.OrderId, Text: req.Body.Text}, nil
}

func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to run the end-to-end tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to IDEMGEN_TEST_DATABASE_URL: %v", err)
	}
	name := "oapi_stdhttp_" + strings.ToLower(rand.Text()[:10])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		t.Fatalf("create database: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	p, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	if err := pgstore.Migrate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, quantity integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return p
}

// oapi-codegen's std-http strict server, registered through the engine's
// ServeMux with no route mounted by hand, passes CheckRoutes; a retry is
// a replay that wrote once, a body that does not decode is answered 400
// and not stored, and a 422 of the operation is stored.
func TestStdHTTPStrictServer(t *testing.T) {
	db := pool(t)
	engine, err := stdhttp.NewEngine(idem.Config{
		Store:  pgstore.New(db),
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	impl := &orders{}
	// docs:begin mount
	mux := engine.ServeMux(http.NewServeMux())
	stdhttp.HandlerWithOptions(stdhttp.NewStrictHandlerWithOptions(impl, nil, stdhttp.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: stdhttp.StrictRequestError,
	}), stdhttp.StdHTTPServerOptions{BaseRouter: mux, ErrorHandlerFunc: stdhttp.StrictRequestError})
	if err := engine.CheckRoutes(idem.PerRoute, mux.Handler); err != nil {
		t.Fatal(err)
	}
	// docs:end mount
	post := func(key, body string) (int, bool) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code, w.Header().Get("Idempotent-Replayed") == "true"
	}
	for _, c := range []struct {
		key, body string
		status    int
		replayed  bool
	}{
		{"k1", `{"item": "lamp", "quantity": 2}`, http.StatusCreated, false},
		{"k1", `{"item": "lamp", "quantity": 2}`, http.StatusCreated, true},
		{"k2", `{"item": "lamp", "quantity": "two"}`, http.StatusBadRequest, false},
		{"k2", `{"item": "lamp", "quantity": "two"}`, http.StatusBadRequest, false},
		{"k2", `{"item": "desk", "quantity": 1}`, http.StatusCreated, false},
		{"k3", `{"item": "lamp", "quantity": 1000}`, http.StatusUnprocessableEntity, false},
		{"k3", `{"item": "lamp", "quantity": 1000}`, http.StatusUnprocessableEntity, true},
	} {
		if status, replayed := post(c.key, c.body); status != c.status || replayed != c.replayed {
			t.Fatalf("%s %s: %d replayed=%v, want %d replayed=%v", c.key, c.body, status, replayed, c.status, c.replayed)
		}
	}
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 2 || impl.runs != 3 {
		t.Fatalf("%d orders (%v) from %d runs, want 2 orders from 3 runs", n, err, impl.runs)
	}
}
