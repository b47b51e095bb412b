package routers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/mux"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// gorilla/mux, like gin, routes on the decoded path unless told
// UseEncodedPath: /orders/o1%2Fnotes is addNote's route to it, and
// updateOrder's for "o1/notes" to the engine. Behind the middleware, that
// request runs neither.
func TestGorillaGetsNoEscapedSlashPastTheMiddleware(t *testing.T) {
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{policy("updateOrder", "/orders/{orderId}", "orderId"), policy("addNote", "/orders/{orderId}/notes", "orderId")},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	count := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	r := mux.NewRouter()
	r.Handle("/orders/{id}", count).Methods(http.MethodPost)
	r.Handle("/orders/{id}/notes", count).Methods(http.MethodPost)
	req := httptest.NewRequest(http.MethodPost, "/orders/o1%2Fnotes", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	e.Middleware(r).ServeHTTP(w, req)
	if runs.Load() != 0 || w.Code != http.StatusBadRequest {
		t.Fatalf("/orders/o1%%2Fnotes = %d %s after %d runs; want 400 and none", w.Code, w.Body, runs.Load())
	}
}
