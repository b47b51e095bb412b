package routers

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gorilla/mux"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// policy is a protected operation at path, whose path parameters are
// params.
func policy(id, path string, params ...string) idem.Policy {
	return idem.Policy{
		Fingerprint: fingerprint.Spec{Path: params},
		OperationID: id, Method: http.MethodPost, Path: path, Scope: idem.ScopeOperation,
		Key:          idem.KeySource{In: key.InHeader, Name: "Idempotency-Key"},
		KeyMaxLength: 255, Required: true, TTL: 24 * time.Hour, Lease: time.Minute,
		MaxSnapshotBytes: 1 << 20, OnLeaseExpiry: idemstore.FailClosed,
	}
}

func newEngine(t *testing.T) *idem.Engine {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{policy("createOrder", "/orders"), policy("addNote", "/orders/{orderId}/notes", "orderId")},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })

// mounting registers the two operations' routes on a router and returns
// its lookup; protect says whether addNote's handler gets its policy.
type mounting func(e *idem.Engine, protect bool) idem.RouteLookup

func handler(e *idem.Engine, op string, protect bool) http.Handler {
	if protect {
		return e.Handler(op, ok)
	}
	return ok
}

var mountings = map[string]mounting{
	"gorilla/mux": func(e *idem.Engine, protect bool) idem.RouteLookup {
		r := mux.NewRouter()
		r.Use(func(h http.Handler) http.Handler { return http.HandlerFunc(h.ServeHTTP) }) // the lookup sees past middleware
		r.Handle("/orders", handler(e, "createOrder", true)).Methods(http.MethodPost)
		r.Handle("/orders/{id}/notes", handler(e, "addNote", protect)).Methods(http.MethodPost)
		return GorillaLookup(r)
	},
	"echo": func(e *idem.Engine, protect bool) idem.RouteLookup {
		r := &EchoRoutes{Echo: echo.New()}
		r.Handle(http.MethodPost, "/orders", handler(e, "createOrder", true))
		r.Handle(http.MethodPost, "/orders/:id/notes", handler(e, "addNote", protect))
		return r.Lookup
	},
	"gin": func(e *idem.Engine, protect bool) idem.RouteLookup {
		gin.SetMode(gin.ReleaseMode)
		r := &GinRoutes{Gin: gin.New()}
		r.Handle(http.MethodPost, "/orders", handler(e, "createOrder", true))
		r.Handle(http.MethodPost, "/orders/:id/notes", handler(e, "addNote", protect))
		return r.Lookup
	},
}

// TestLookupsFindProtectedRoutes: with both routes protected CheckRoutes
// passes; with addNote's handler unprotected it names addNote, and only it.
func TestLookupsFindProtectedRoutes(t *testing.T) {
	for name, mount := range mountings {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t)
			if err := e.CheckRoutes(idem.PerRoute, mount(e, true)); err != nil {
				t.Errorf("every route protected: %v", err)
			}
			err := e.CheckRoutes(idem.PerRoute, mount(e, false))
			if err == nil || !strings.Contains(err.Error(), "addNote") || strings.Contains(err.Error(), "createOrder") {
				t.Errorf("addNote unprotected: CheckRoutes says %v, want addNote's route reported", err)
			}
		})
	}
}

// TestLookupsFindNoRoute: a path and a method the router does not serve
// have no route (the lookup may still return the router's 404 or 405
// handler).
func TestLookupsFindNoRoute(t *testing.T) {
	for name, mount := range mountings {
		t.Run(name, func(t *testing.T) {
			lookup := mount(newEngine(t), true)
			for _, req := range []*http.Request{
				mustRequest(t, http.MethodPost, "/invoices"),
				mustRequest(t, http.MethodPatch, "/orders"),
				mustRequest(t, http.MethodPost, "/orders/1/notes/2"),
			} {
				if _, route := lookup(req); route != "" {
					t.Errorf("%s %s: found route %q", req.Method, req.URL.Path, route)
				}
			}
		})
	}
}

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, path, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
