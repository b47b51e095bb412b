package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemogen"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

const order = `{"item": "lamp", "quantity": 2}`

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store, db := openStore(t)
	handler, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	first, firstBody := post(handler, "order-1", order)
	second, secondBody := post(handler, "order-1", order)
	if first.StatusCode != http.StatusCreated || second.StatusCode != http.StatusCreated {
		t.Fatalf("answers %d %s and %d %s, want two 201s", first.StatusCode, firstBody, second.StatusCode, secondBody)
	}
	if first.Header.Get("Idempotent-Replayed") != "" || second.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed %q then %q, want none then true",
			first.Header.Get("Idempotent-Replayed"), second.Header.Get("Idempotent-Replayed"))
	}
	if firstBody != secondBody {
		t.Errorf("the replay %q differs from the first answer %q", secondBody, firstBody)
	}
	if n := countOrders(t, db); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestMalformedBodyIsNotStored: a body ogen cannot decode is its 400, not
// the key's answer, so the corrected request under the same key runs.
func TestMalformedBodyIsNotStored(t *testing.T) {
	store, db := openStore(t)
	handler, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if w, body := post(handler, "order-1", `{"item": "lamp", "quantity": "two"}`); w.StatusCode != http.StatusBadRequest || w.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("malformed body: %d replayed=%q %s, want ogen's 400, unstored", w.StatusCode, w.Header.Get("Idempotent-Replayed"), body)
		}
	}
	if w, body := post(handler, "order-1", order); w.StatusCode != http.StatusCreated || w.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("corrected request under the same key: %d replayed=%q %s, want it to run", w.StatusCode, w.Header.Get("Idempotent-Replayed"), body)
	}
	if n := countOrders(t, db); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestCheckRoutesAsksTheServer: the lookup matches as the ogen server
// does, so a server that does not serve the operation's path (here, below
// a prefix the engine is not told of) stops the service.
func TestCheckRoutesAsksTheServer(t *testing.T) {
	store, _ := openStore(t)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: idem.SingleTenant("default")})
	if err != nil {
		t.Fatal(err)
	}
	server, err := api.NewServer(orders{}, api.WithPathPrefix("/v1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.CheckRoutes(idem.BehindMiddleware, idemogen.Lookup(server, server.FindPath)); err == nil || !strings.Contains(err.Error(), "createOrder") {
		t.Fatalf("CheckRoutes of a server below /v1: %v, want an error naming createOrder", err)
	}
}

func openStore(t *testing.T) (*sqlitestore.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, schema); err != nil {
		t.Fatal(err)
	}
	return store, store.DB()
}

// post sends an order to h under key, as the page's curl command does.
func post(h http.Handler, key, body string) (*http.Response, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, newRequest("", key, body))
	b, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(b)
}

// newRequest is the page's curl command, to the service at base ("" for a
// handler in process).
func newRequest(base, key, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	req.RequestURI = "" // a client's request, when base is a server's
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return req
}

func countOrders(t testing.TB, db *sql.DB) (n int) {
	t.Helper()
	if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
