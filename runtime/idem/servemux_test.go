package idem_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// oapiServeMux is the interface oapi-codegen's std-http server registers
// its routes through (its generated ServeMux, the BaseRouter option).
type oapiServeMux interface {
	HandleFunc(pattern string, handler func(http.ResponseWriter, *http.Request))
	http.Handler
}

var _ oapiServeMux = (*idem.ServeMux)(nil)

// strictTransfer writes one transfer through the transaction it reaches
// from the request's context, as a strict-server method does.
func strictTransfer(runs *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		tx, err := idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO transfers (amount) VALUES (1)`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
}

// A transactional operation whose handler reaches its transaction through
// the context, registered on a plain ServeMux, fails CheckRoutes per route; through
// the engine's ServeMux it passes both mountings with no per-route code,
// and its requests are protected with no middleware in front.
func TestServeMuxMountsTransactionalRoutes(t *testing.T) {
	eng, db := sqliteTxEngine(t)
	var runs atomic.Int64

	plain := http.NewServeMux()
	plain.HandleFunc("POST /transfers", strictTransfer(&runs))
	if err := eng.CheckRoutes(idem.PerRoute, plain.Handler); err == nil || !strings.Contains(err.Error(), "does not apply the policy") {
		t.Fatalf("plain ServeMux: CheckRoutes = %v, want the route refused", err)
	}

	mux := eng.ServeMux(http.NewServeMux())
	mux.HandleFunc("POST /transfers", strictTransfer(&runs))
	mux.HandleFunc("POST /other", strictTransfer(&runs))
	for _, m := range []idem.Mounting{idem.PerRoute, idem.BehindMiddleware} {
		if err := eng.CheckRoutes(m, mux.Handler); err != nil {
			t.Fatalf("engine's ServeMux, mounting %d: %v", m, err)
		}
	}
	for _, h := range []http.Handler{mux, eng.Middleware(mux)} {
		postTransfer(h, "k")
		if w := postTransfer(h, "k"); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d replayed=%q, want a replay", w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
	if n := countTransfers(t, db); n != 1 || runs.Load() != 1 {
		t.Fatalf("%d transfers from %d runs, want 1 and 1", n, runs.Load())
	}
	// A route that is no operation's is registered as given.
	if h, _ := mux.Handler(httpRequest(t, "/other")); appliesPolicy(eng, h) {
		t.Fatal("a route of no operation was given a policy")
	}
}

// A pattern names an operation below Config.BasePath, and whatever its
// parameters are called; a route for every method names the one
// operation on its path. Neither a host nor a pattern of the router's own
// syntax stops the match.
func TestRouteNamesTheOperationOfAPattern(t *testing.T) {
	e := newEngine(t, idem.Config{BasePath: "/v1", Policies: []idem.Policy{adoptionPolicy(), transferPolicy()}})
	var runs atomic.Int64
	for _, c := range []struct {
		pattern string
		applies bool
	}{
		{"POST /v1/pets/{id}/adoptions", true},
		{"POST /pets/{pet_id}/adoptions", true},
		{"/v1/pets/{x}/adoptions", true},
		{"POST example.test/v1/pets/{id}/adoptions", true},
		{"PATCH /v1/pets/{id}/adoptions", false},
		{"POST /v2/pets/{id}/adoptions", false},
		{"POST /v1/pets/{id}", false},
		{"POST /v1/pets/{id...}", false},
	} {
		mux := e.ServeMux(http.NewServeMux())
		mux.Handle(c.pattern, created(&runs))
		req := sampleOf(t, c.pattern)
		h, route := mux.Handler(req)
		if route == "" {
			t.Errorf("pattern %q: the mux does not route the sample", c.pattern)
			continue
		}
		if got := appliesPolicy(e, h); got != c.applies {
			t.Errorf("pattern %q: policy applied %v, want %v", c.pattern, got, c.applies)
		}
	}
}

// sampleOf is a request that the ServeMux pattern matches.
func sampleOf(t *testing.T, pattern string) *http.Request {
	t.Helper()
	method, rest, ok := strings.Cut(pattern, " ")
	if !ok {
		method, rest = http.MethodPost, pattern
	}
	host, path := "", rest
	if i := strings.IndexByte(rest, '/'); i > 0 {
		host, path = rest[:i], rest[i:]
	}
	for strings.Contains(path, "{") {
		i, j := strings.IndexByte(path, '{'), strings.IndexByte(path, '}')
		path = path[:i] + "p1" + path[j+1:]
	}
	r := httpRequest(t, path)
	r.Method = method
	if host != "" {
		r.Host = host
	}
	return r
}

func httpRequest(t *testing.T, path string) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(context.Background(), http.MethodPost, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// appliesPolicy reports whether CheckRoutes takes h for a handler that
// applies a policy.
func appliesPolicy(e *idem.Engine, h http.Handler) bool {
	err := e.CheckRoutes(idem.PerRoute, func(*http.Request) (http.Handler, string) { return h, "/x" })
	return err == nil || !strings.Contains(err.Error(), "does not apply the policy")
}

// A path net/http's ServeMux cannot register (a parameter beside text in
// one segment, as Twilio's "{Sid}.json") is refused, not a panic: Err and
// CheckRoutes name the routers that serve it, the request meets a 404
// rather than an unprotected handler, and the mux's other routes serve.
func TestServeMuxRefusesAPatternItCannotParse(t *testing.T) {
	sid := idemtest.Policy("updateCall", "/Accounts/{Sid}.json", func(p *idem.Policy) { p.Fingerprint.Path = []string{"Sid"} })
	var runs atomic.Int64
	eng := newEngine(t, idem.Config{Policies: []idem.Policy{sid, transferPolicy()}})
	mux := eng.ServeMux(http.NewServeMux())
	mux.HandleFunc("POST /Accounts/{Sid}.json", created(&runs))
	mux.HandleFunc("POST /transfers", created(&runs))

	for name, err := range map[string]error{"Err": mux.Err(), "CheckRoutes": eng.CheckRoutes(idem.PerRoute, mux.Handler)} {
		if err == nil || !strings.Contains(err.Error(), `cannot register "POST /Accounts/{Sid}.json"`) || !strings.Contains(err.Error(), "chi") {
			t.Errorf("%s = %v, want the refused pattern and the routers that serve it", name, err)
		}
	}
	if w := post(t, mux, "/Accounts/CA1.json", "k1"); w.Code != http.StatusNotFound {
		t.Errorf("request on the refused route: %d, want 404", w.Code)
	}
	post(t, mux, "/transfers", "k2")
	if w := post(t, mux, "/transfers", "k2"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("the mux's other route: %d replayed=%q, want a replay", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if runs.Load() != 1 {
		t.Errorf("%d handler runs, want 1", runs.Load())
	}
}
