package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/docs/stacks/stacktest"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/sqlitestore"

	"example.com/orders/api"
)

func init() { gin.SetMode(gin.TestMode) }

// TestPage: the page's curl commands, in process: the same order sent
// twice under one key is placed once, the second answer the first
// replayed; a body the server cannot decode is its 400, not stored, so
// the corrected request under the same key runs.
func TestPage(t *testing.T) {
	stacktest.InProcess(t, schema, func(store *sqlitestore.Store) (http.Handler, error) {
		return newHandler(store, orders{})
	})
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
