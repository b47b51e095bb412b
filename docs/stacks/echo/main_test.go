package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
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
