package idem_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
)

// postRawBody writes a POST with the request line's path as given to srv
// and returns the answer's status and body.
func postRawBody(t *testing.T, srv *httptest.Server, path, key string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: example.test\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", path, key)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// routerOf builds a router serving POST /accounts/{id} with a handler
// that answers h of the parameter as the router hands it over.
type routerOf func(h func(id string) string) http.Handler

func chiAccounts(h func(string) string) http.Handler {
	r := chi.NewRouter()
	r.Post("/accounts/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, h(chi.URLParam(r, "id")))
	})
	return r
}

func echoAccounts(h func(string) string) http.Handler {
	ec := echo.New()
	ec.POST("/accounts/:id", func(c echo.Context) error {
		return c.String(http.StatusCreated, h(c.Param("id")))
	})
	return ec
}

func ginRawPathAccounts(h func(string) string) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.UseRawPath = true
	g.POST("/accounts/:id", func(c *gin.Context) {
		c.String(http.StatusCreated, h(c.Param("id")))
	})
	return g
}

// checkSpellings sends each pair's first path, then its second under the
// same key, through Engine.Middleware in front of each router, and fails
// when the second is answered with the first one's replay although the
// router hands its handler another parameter value for it.
func checkSpellings(t *testing.T, routers map[string]routerOf, pairs [][2]string) {
	t.Helper()
	for name, mk := range routers {
		for _, p := range pairs {
			t.Run(name+p[0], func(t *testing.T) {
				e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("protectedOp", "/accounts/{id}", "id")}})
				var runs atomic.Int64
				srv := httptest.NewServer(e.Middleware(mk(func(id string) string {
					runs.Add(1)
					return "account " + id
				})))
				defer srv.Close()
				c1, b1 := postRawBody(t, srv, p[0], "k1")
				if c1 == http.StatusBadRequest && runs.Load() == 0 {
					return // refused as a path routers read otherwise: nothing ran
				}
				if c1 != http.StatusCreated {
					t.Fatalf("POST %s: status %d (%s), want 201, or 400 with nothing run", p[0], c1, b1)
				}
				// What the router hands the handler for the second spelling.
				plain := httptest.NewServer(mk(func(id string) string { return "account " + id }))
				defer plain.Close()
				_, want := postRawBody(t, plain, p[1], "k-unused")
				if want == b1 {
					t.Skipf("%s reads %s and %s alike (%q)", name, p[0], p[1], b1)
				}
				c2, b2 := postRawBody(t, srv, p[1], "k1")
				if c2 == http.StatusCreated && b2 == b1 && runs.Load() == 1 {
					t.Fatalf("%s: POST %s under key k1 answered %q; POST %s under the same key, for which %s hands the handler %q, was answered with that replay (status %d, %q), not a 422 nor a run of its own: the engine's fingerprint reads the parameter otherwise than the router",
						name, p[0], b1, p[1], name, want, c2, b2)
				}
			})
		}
	}
}

// chi and echo route on URL.RawPath whenever net/http keeps one, and hand
// the handler a parameter's value as written there, escapes and all; with
// no RawPath they route on, and hand out, the decoded path. A request line
// that leaves raw a character Go escapes in a path but that is a valid
// URL character (parentheses, "!", "*", an apostrophe, brackets) beside an
// escape ("/accounts/(%20x") keeps its RawPath, which is what EscapedPath
// returns, so pathtemplate.RequestPath accepts it; Go's own spelling of
// the same decoded path ("/accounts/%28%20x") has none. The engine reads
// both as the parameter "( x", while the router hands the handler
// "(%20x" for the first and "( x" for the second: under one fingerprint,
// a retry under one key that names another resource to a handler that
// takes the parameter as given would be answered with the first one's
// replay, where docs/semantics.md §3.2 and §7.1 make every path
// parameter, as the router reads the request, part of the fingerprint.
// The first spelling is refused (400, nothing runs).
func TestRawPathParameterSpelledTwoWaysIsOneFingerprint(t *testing.T) {
	checkSpellings(t, map[string]routerOf{"chi": chiAccounts, "echo": echoAccounts}, [][2]string{
		{"/accounts/(%20x", "/accounts/%28%20x"},
		{"/accounts/O'Brien%C3%A9", "/accounts/O%27Brien%C3%A9"},
	})
}

// docs/semantics.md §7.1 and docs/runtime.md: "A raw path with no escape
// in it (/café) is read alike by all and is not refused." gin with
// UseRawPath (a router the docs name among those the engine reads paths
// for) routes on RawPath when net/http keeps one and decodes a parameter
// read there with url.QueryUnescape, where "+" is a space: a request line
// "/accounts/é+b" (raw UTF-8, as curl sends it; no escape; RawPath is the
// path itself, which RequestPath accepts) hands the handler "é b", where
// the engine, ServeMux and chi read "é+b", and Go's own spelling
// "/accounts/%C3%A9+b" (no RawPath) hands gin's handler "é+b". The engine
// reads both as "é+b": were the first served, the handler would run for
// account "é b" under a fingerprint that says "é+b", and a retry under
// the same key that is "é+b" to the handler would get the replay of
// "é b"'s answer. The first spelling is refused (400, nothing runs).
func TestGinRawPathReadsPlusInARawPathAsSpace(t *testing.T) {
	checkSpellings(t, map[string]routerOf{"gin UseRawPath": ginRawPathAccounts}, [][2]string{
		{"/accounts/é+b", "/accounts/%C3%A9+b"},
		{"/accounts/(a+b)", "/accounts/%28a+b%29"},
	})
}
