package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// RequestIdentity is the identity the request's row is stored under: the
// key as its HMAC under the newest secret, in the operation's scope and
// the request's tenant; a keyless request and a context the engine never
// saw have none.
func TestRequestIdentity(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	var got idemstore.Identity
	var ok bool
	e, err := idem.New(idem.Config{
		Store: memstore.New(),
		Policies: []idem.Policy{idemtest.Policy("createOrder", "/orders", func(p *idem.Policy) {
			p.Required = false
		})},
		Tenant:  func(*http.Request) (string, bool) { return "acme", true },
		Secrets: [][]byte{secret},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = idem.RequestIdentity(r.Context())
		w.WriteHeader(http.StatusCreated)
	}))
	post := func(key string) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	post("order-1")
	want := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: idemstore.StoredKey(secret, "order-1")}
	if !ok || got != want {
		t.Errorf("RequestIdentity = %+v, %v; want %+v", got, ok, want)
	}
	post("")
	if ok {
		t.Errorf("a keyless request has identity %+v", got)
	}
	if id, ok := idem.RequestIdentity(context.Background()); ok {
		t.Errorf("a context the engine never saw has identity %+v", id)
	}
}
