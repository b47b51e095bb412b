package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"

	"example.com/shop/api"
)

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	handler, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	stacktest.RetryIsReplayed(t, handler, store)
}

// TestAuthenticationWrapsTheEngine: behind engine.Middleware, r.Use's
// authentication runs too late to set the tenant, and the engine refuses
// the order without placing it; wrapped around the engine, it places it.
func TestAuthenticationWrapsTheEngine(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		t.Fatal(err)
	}
	if w, body := stacktest.Post(tenantTooLate(engine), "order-1", stacktest.Order); w.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "tenant-unresolved") {
		t.Errorf("authentication inside the router: %d %s, want the engine's 500 tenant-unresolved", w.StatusCode, body)
	}
	if n := stacktest.Orders(t, store); n != 0 {
		t.Errorf("%d orders after the refused request, want 0", n)
	}
	if w, body := stacktest.Post(tenantFirst(engine), "order-1", stacktest.Order); w.StatusCode != http.StatusCreated {
		t.Errorf("authentication around the engine: %d %s, want 201", w.StatusCode, body)
	}
}
