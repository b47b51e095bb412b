package stacktest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Order is the body of the pages' curl command.
const Order = `{"item": "lamp", "quantity": 2}`

// NewRequest is the pages' curl command: body POSTed to base's /orders
// under key, as tenant acme ("" for base sends it to a handler in
// process).
func NewRequest(base, key, body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, base+"/orders", strings.NewReader(body))
	req.RequestURI = "" // a client's request, when base is a server's
	req.Header.Set("Authorization", "Bearer acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return req
}

// Post sends the pages' curl command to h in process and returns its
// answer with the body read.
func Post(h http.Handler, key, body string) (*http.Response, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, NewRequest("", key, body))
	b, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(b)
}

// OpenStore opens a store on a database in the test's own directory, with
// the key table and the service's tables of schema.
func OpenStore(t testing.TB, schema string) *sqlitestore.Store {
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
	return store
}

// Orders counts the orders the service placed in store.
func Orders(t testing.TB, store *sqlitestore.Store) (n int) {
	t.Helper()
	if err := store.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// RetryIsReplayed sends the page's curl command twice under one key to h,
// the service on store, and checks that the order is placed once and the
// second answer is the first, marked replayed.
func RetryIsReplayed(t *testing.T, h http.Handler, store *sqlitestore.Store) {
	t.Helper()
	first, firstBody := Post(h, "order-1", Order)
	second, secondBody := Post(h, "order-1", Order)
	if first.StatusCode != http.StatusCreated || second.StatusCode != http.StatusCreated {
		t.Fatalf("answers %d %s and %d %s, want two 201s", first.StatusCode, firstBody, second.StatusCode, secondBody)
	}
	if first.Header.Get(problem.ReplayedHeader) != "" || second.Header.Get(problem.ReplayedHeader) != "true" {
		t.Errorf("%s %q then %q, want none then true", problem.ReplayedHeader,
			first.Header.Get(problem.ReplayedHeader), second.Header.Get(problem.ReplayedHeader))
	}
	if firstBody != secondBody {
		t.Errorf("the replay %q differs from the first answer %q", secondBody, firstBody)
	}
	if n := Orders(t, store); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// MalformedBodyIsNotStored sends h, the service on store, a body its
// server cannot decode twice, then the corrected order under the same key:
// the first two are the server's 400, not stored, and the order runs.
func MalformedBodyIsNotStored(t *testing.T, h http.Handler, store *sqlitestore.Store) {
	t.Helper()
	for range 2 {
		if w, body := Post(h, "order-1", `{"item": "lamp", "quantity": "two"}`); w.StatusCode != http.StatusBadRequest || w.Header.Get(problem.ReplayedHeader) != "" {
			t.Fatalf("malformed body: %d replayed=%q %s, want the server's 400, unstored", w.StatusCode, w.Header.Get(problem.ReplayedHeader), body)
		}
	}
	if w, body := Post(h, "order-1", Order); w.StatusCode != http.StatusCreated || w.Header.Get(problem.ReplayedHeader) != "" {
		t.Fatalf("corrected request under the same key: %d replayed=%q %s, want it to run", w.StatusCode, w.Header.Get(problem.ReplayedHeader), body)
	}
	if n := Orders(t, store); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// InProcess runs the in-process scenarios, RetryIsReplayed and
// MalformedBodyIsNotStored, each a subtest on a store of its own (the key
// table and the tables of schema) with the handler mount returns for it.
func InProcess(t *testing.T, schema string, mount func(*sqlitestore.Store) (http.Handler, error)) {
	for name, scenario := range map[string]func(*testing.T, http.Handler, *sqlitestore.Store){
		"retry is replayed":            RetryIsReplayed,
		"malformed body is not stored": MalformedBodyIsNotStored,
	} {
		t.Run(name, func(t *testing.T) {
			store := OpenStore(t, schema)
			h, err := mount(store)
			if err != nil {
				t.Fatal(err)
			}
			scenario(t, h, store)
		})
	}
}
