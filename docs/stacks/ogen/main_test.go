package main

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemogen"

	"example.com/orders/api"
)

// TestRetryIsReplayed: the page's two curl commands, in process. The same
// order sent twice under one key is placed once, and the second answer is
// the first, marked replayed.
func TestRetryIsReplayed(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	handler, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.RetryIsReplayed(t, handler, store)
}

// TestMalformedBodyIsNotStored: a body ogen cannot decode is its 400, not
// the key's answer, so the corrected request under the same key runs.
func TestMalformedBodyIsNotStored(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	handler, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.MalformedBodyIsNotStored(t, handler, store)
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
