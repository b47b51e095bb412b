package main

import (
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"

	"example.com/orders/api"
)

func init() { gin.SetMode(gin.TestMode) }

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

// TestMalformedBodyIsNotStored: a body the strict server cannot decode is
// its 400, not the key's answer, so the corrected request under the same
// key runs.
func TestMalformedBodyIsNotStored(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	handler, err := newHandler(store, orders{})
	if err != nil {
		t.Fatal(err)
	}
	stacktest.MalformedBodyIsNotStored(t, handler, store)
}

// TestCheckRoutesNeedsContextWithFallback: without ContextWithFallback the
// strict method could not find its transaction in the *gin.Context, and
// the service does not start.
func TestCheckRoutesNeedsContextWithFallback(t *testing.T) {
	store := stacktest.OpenStore(t, schema)
	engine, err := api.NewEngine(idem.Config{Store: store, Tenant: tenantOf})
	if err != nil {
		t.Fatal(err)
	}
	g := gin.New()
	g.Use(authenticate, idemgin.Middleware(engine))
	api.RegisterHandlers(g, api.NewStrictHandler(orders{}, nil))
	if err := idemgin.CheckRoutes(engine, g); err == nil || !strings.Contains(err.Error(), "ContextWithFallback") {
		t.Fatalf("CheckRoutes without ContextWithFallback: %v, want an error naming it", err)
	}
}
