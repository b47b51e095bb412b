package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store := openStore(t)
	handler, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	first, firstBody := postOrder(t, handler)
	second, secondBody := postOrder(t, handler)
	if first.Code != http.StatusCreated || second.Code != http.StatusCreated {
		t.Fatalf("answers %d %s and %d %s, want two 201s", first.Code, firstBody, second.Code, secondBody)
	}
	if first.Header().Get("Idempotent-Replayed") != "" || second.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("Idempotent-Replayed %q then %q, want none then true",
			first.Header().Get("Idempotent-Replayed"), second.Header().Get("Idempotent-Replayed"))
	}
	if firstBody != secondBody {
		t.Errorf("the replay %q differs from the first answer %q", secondBody, firstBody)
	}
	if n := countOrders(t, store); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

func openStore(t *testing.T) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "shop.db"))
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
	return store
}

// postOrder sends the page's curl command to h.
func postOrder(t *testing.T, h http.Handler) (*httptest.ResponseRecorder, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item": "lamp", "quantity": 2}`))
	req.Header.Set("Authorization", "Bearer acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "order-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	body, _ := io.ReadAll(w.Result().Body)
	return w, string(body)
}

func countOrders(t *testing.T, store *sqlitestore.Store) int {
	t.Helper()
	var n int
	if err := store.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
