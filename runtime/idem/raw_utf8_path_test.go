package idem_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
)

// sendRaw writes a POST with the request line's path as given, bytes
// beyond ASCII unescaped, as curl or a raw client sends them, to srv,
// and returns the answer's status.
func sendRaw(t *testing.T, srv *httptest.Server, path, key string) int {
	t.Helper()
	return sendRawLine(t, srv, http.MethodPost, path, "Content-Type: application/json\r\nIdempotency-Key: "+key+"\r\nContent-Length: 2\r\n", "{}")
}

// sendRawLine writes a request of method with the request line's path as
// given, header lines and body, to srv, and returns the answer's status.
func sendRawLine(t *testing.T, srv *httptest.Server, method, path, header, body string) int {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: example.test\r\n%sConnection: close\r\n\r\n%s", method, path, header, body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// A request path whose request line carries a byte beyond ASCII
// unescaped beside an escape ("/accounts/é%2Fa") is one net/http keeps as
// written in URL.RawPath, which chi routes on, while URL.EscapedPath
// (which gives up on a RawPath with such a byte) spells it escaped anew,
// with the %2F decoded into a separator. chi serves the protected route
// /accounts/{id} with id "é%2Fa"; the engine must read the path as chi
// does (docs/semantics.md §7.1) or refuse it, never pass the protected
// handler through unclaimed, where each retry of one key runs it again
// and a keyless request runs although the policy requires a key.
func TestRawNonASCIIPathByteBesideEscapedSlashBehindChi(t *testing.T) {
	cases := []struct{ tmpl, path string }{
		{"/accounts/{id}", "/accounts/é%2Fa"},
		{"/accounts/{id}/close", "/accounts/é%2Fa/close"},
		{"/{a}/{b}", "/é%2Fa/v"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("protectedOp", c.tmpl, templateParams(c.tmpl)...)}})
			var runs atomic.Int64
			var mu sync.Mutex
			var seen []string
			r := chi.NewRouter()
			r.Post(c.tmpl, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				mu.Lock()
				seen = append(seen, chi.URLParam(r, templateParams(c.tmpl)[0]))
				mu.Unlock()
				w.WriteHeader(http.StatusCreated)
			})
			if err := e.CheckRoutes(idem.BehindMiddleware, idemchi.Lookup(r)); err != nil {
				t.Fatalf("CheckRoutes: %v", err)
			}
			srv := httptest.NewServer(e.Middleware(r))
			defer srv.Close()
			codes := []int{sendRaw(t, srv, c.path, "k1"), sendRaw(t, srv, c.path, "k1"), sendRaw(t, srv, c.path, "")}
			if n := runs.Load(); n > 1 {
				t.Fatalf("POST %s: chi ran the protected operation's handler (%s, params %q) %d times, twice under one key and once with no key (statuses %v): the engine let the request through unclaimed",
					c.path, c.tmpl, seen, n, codes)
			}
		})
	}
}

// A path that keeps a character a URL must escape raw beside its escapes
// is refused with 400 non-canonical-path on a protected operation's
// method however the engine is mounted: behind Engine.Middleware in front
// of gin with UseRawPath (which routes on the path as written, as chi
// does), and by Engine.Handler on chi's route. A method no policy
// protects passes through.
func TestRawUnescapedPathRefusedWhereverMounted(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	const tmpl, path = "/accounts/{id}", "/accounts/é%2Fa"
	for _, raw := range []string{path, "/accounts/%7C%2F{a}", "/accounts/a%2F|b", "/accounts/\"%2F`", "/accounts/^%2F<"} {
		for _, mount := range []string{"gin UseRawPath behind Engine.Middleware", "chi per route"} {
			t.Run(mount+raw, func(t *testing.T) {
				e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("protectedOp", tmpl, "id")}})
				var runs atomic.Int64
				run := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					runs.Add(1)
					w.WriteHeader(http.StatusCreated)
				})
				var h http.Handler
				if mount == "chi per route" {
					r := chi.NewRouter()
					r.Post(tmpl, e.Handler("protectedOp", run).ServeHTTP)
					r.Get(tmpl, run)
					h = r
				} else {
					g := gin.New()
					g.UseRawPath = true
					g.POST("/accounts/:id", gin.WrapH(run))
					g.GET("/accounts/:id", gin.WrapH(run))
					h = e.Middleware(g)
				}
				srv := httptest.NewServer(h)
				defer srv.Close()
				if code := sendRaw(t, srv, raw, "k1"); code != http.StatusBadRequest || runs.Load() != 0 {
					t.Fatalf("POST %s: status %d, %d runs; want 400 non-canonical-path and none", raw, code, runs.Load())
				}
				if code := sendRawLine(t, srv, http.MethodGet, raw, "", ""); code != http.StatusCreated || runs.Load() != 1 {
					t.Fatalf("GET %s: status %d, %d runs; a method no policy protects passes through", raw, code, runs.Load())
				}
			})
		}
	}
}
