package main

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"

	"example.com/shop/api"
)

// The engine can also sit in front of the whole router, as middleware.
// chi runs r.Use's middleware inside the router, so after an engine
// mounted in front of it: authentication that sets the tenant must then
// wrap the engine. middleware_test.go sends a request through both.

// docs:begin wrong
// tenantTooLate is wrong: the engine runs before authenticate, finds no
// tenant and refuses every protected request with a 500.
func tenantTooLate(engine *idem.Engine) http.Handler {
	r := chi.NewRouter()
	r.Use(authenticate) // runs after engine.Middleware below
	r.Method(http.MethodPost, "/orders", api.CreateOrder(createOrder))
	return engine.Middleware(r)
}

// docs:end wrong

// docs:begin right
// tenantFirst is right: authentication wraps the engine.
func tenantFirst(engine *idem.Engine) http.Handler {
	r := chi.NewRouter()
	r.Method(http.MethodPost, "/orders", api.CreateOrder(createOrder))
	return authenticate(engine.Middleware(r))
}

// docs:end right
