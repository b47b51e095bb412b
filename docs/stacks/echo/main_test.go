package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

// TestPage: the page's curl commands, in process: the same order sent
// twice under one key is placed once, the second answer the first
// replayed; a body the server cannot decode is its 400, not stored, so
// the corrected request under the same key runs.
func TestPage(t *testing.T) {
	stacktest.InProcess(t, schema, func(store *sqlitestore.Store) (http.Handler, error) {
		return newHandler(store, orders{})
	})
}

// TestCheckRoutesAsksEcho: the check asks echo's router, so a strict
// server registered below a prefix the engine is not told of stops the
// service.
func TestCheckRoutesAsksEcho(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(authenticate, idemecho.Middleware(engine))
	api.RegisterHandlersWithBaseURL(e, api.NewStrictHandler(orders{}, nil), "/v1")
	if err := idemecho.CheckRoutes(engine, e); err == nil || !strings.Contains(err.Error(), "createOrder") {
		t.Fatalf("CheckRoutes of a server below /v1: %v, want an error naming createOrder", err)
	}
}

// order sends h the page's curl command with query (the part after "?")
// and body under key, and returns its status, whether it was a replay,
// and its body.
func order(h http.Handler, key, query, body string) (status int, replayed bool, text string) {
	req := stacktest.NewRequest("", key, body)
	req.URL.RawQuery = query
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, w.Header().Get(problem.ReplayedHeader) == "true", string(b)
}

// mount is the page's service on a store of the test's own.
func mount(t *testing.T) (http.Handler, *sqlitestore.Store) {
	t.Helper()
	store := stacktest.OpenStore(t, schema)
	h, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	return h, store
}

// TestUnboundParameterIsNotStored: ?express=maybe is the 400 of
// oapi-codegen's wrapper, answered before the strict server, and not
// stored: the corrected request under the same key places the order
// (where the stored 400 met it as another request, 422).
func TestUnboundParameterIsNotStored(t *testing.T) {
	h, store := mount(t)
	for range 2 {
		if status, replayed, body := order(h, "order-1", "express=maybe", stacktest.Order); status != http.StatusBadRequest || replayed {
			t.Fatalf("?express=maybe: %d replayed=%v %s, want the wrapper's 400, unstored", status, replayed, body)
		}
	}
	if status, replayed, body := order(h, "order-1", "express=true", stacktest.Order); status != http.StatusCreated || replayed {
		t.Fatalf("corrected request under the same key: %d replayed=%v %s, want it to run", status, replayed, body)
	}
	if n := stacktest.Orders(t, store); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestMethodErrorIsStored: a 400 CreateOrder returns itself (a quantity
// of 0) is the key's answer: the retry is that 400 replayed.
func TestMethodErrorIsStored(t *testing.T) {
	h, _ := mount(t)
	zero := `{"item": "lamp", "quantity": 0}`
	status, replayed, first := order(h, "order-1", "", zero)
	if status != http.StatusBadRequest || replayed {
		t.Fatalf("quantity 0: %d replayed=%v %s, want the method's 400", status, replayed, first)
	}
	if status, replayed, retry := order(h, "order-1", "", zero); status != http.StatusBadRequest || !replayed || retry != first {
		t.Fatalf("retry: %d replayed=%v %s, want %s replayed", status, replayed, retry, first)
	}
}
