package idem_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemchi"
)

// Two request lines that differ only in a needed escape of a mixed
// segment's separator ("-" and "%2D") reach chi's /-{from}-{to} with
// different parameters when the path also carries a byte beyond ASCII
// unescaped: chi routes on URL.RawPath as written, while the engine reads
// URL.EscapedPath, which gives up on such a RawPath and escapes the
// decoded path anew, the same for both. The fingerprint covers the path
// parameters the handler is given (docs/semantics.md §5, §7.1): a key
// reused for the other request must be refused (422, or 400 when the
// engine refuses such paths outright), never answered with the first
// request's stored answer while the handler never ran for the second's
// parameters.
func TestRawNonASCIIMixedSegmentParamsShareAFingerprintBehindChi(t *testing.T) {
	const tmpl = "/span/-{from}-{to}"
	first, second := "/span/-~%2D%252F-é", "/span/-~-%252F-é"
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("protectedOp", tmpl, "from", "to")}})
	var runs atomic.Int64
	var mu sync.Mutex
	var seen [][2]string
	r := chi.NewRouter()
	r.Post(tmpl, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		mu.Lock()
		seen = append(seen, [2]string{chi.URLParam(r, "from"), chi.URLParam(r, "to")})
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	if err := e.CheckRoutes(idem.BehindMiddleware, idemchi.Lookup(r)); err != nil {
		t.Fatalf("CheckRoutes: %v", err)
	}
	srv := httptest.NewServer(e.Middleware(r))
	defer srv.Close()
	c1 := sendRaw(t, srv, first, "k1")
	ran := runs.Load()
	if !(c1 == http.StatusCreated && ran == 1) && !(c1 == http.StatusBadRequest && ran == 0) {
		t.Fatalf("POST %s: status %d, %d runs; want 201 and one run, or 400 and none", first, c1, ran)
	}
	c2 := sendRaw(t, srv, second, "k1")
	replayed := c2 < 300 && runs.Load() == ran
	// The second request under a key of its own shows the parameters chi
	// hands its handler.
	sendRaw(t, srv, second, "k2")
	if replayed {
		t.Fatalf("POST %s under the key of POST %s: status %d, its handler not run, though chi hands the two handlers other parameters (from, to = %q): the engine fingerprinted both alike and answered the second with the first's stored answer; want 422",
			second, first, c2, seen)
	}
}
