package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemogen"
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

// TestCheckRoutesAsksTheServer: the lookup matches as the ogen server
// does, so a server that does not serve the operation's path (here, below
// a prefix the engine is not told of) stops the service.
func TestCheckRoutesAsksTheServer(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
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
