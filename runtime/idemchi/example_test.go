package idemchi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func ExampleRouter() {
	engine, err := idem.New(idem.Config{
		Store: memstore.New(),
		Policies: []idem.Policy{{
			OperationID: "createOrder", Method: http.MethodPost, Path: "/orders", Scope: idem.ScopeOperation,
			Key:          idem.KeySource{In: key.InHeader, Name: "Idempotency-Key"},
			KeyMaxLength: 255, Required: true, TTL: 24 * time.Hour, Lease: time.Minute,
			MaxSnapshotBytes: 1 << 20, OnLeaseExpiry: idemstore.FailClosed,
		}},
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := chi.NewRouter()
	// oapi-codegen's chi server takes it as ChiServerOptions.BaseRouter.
	idemchi.Router(engine, r).Post("/orders", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	fmt.Println(engine.CheckRoutes(idem.PerRoute, idemchi.Lookup(r)))
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, "replayed:", w.Header().Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// <nil>
	// 201 replayed: false
	// 201 replayed: true
}
