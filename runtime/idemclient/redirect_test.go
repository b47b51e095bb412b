package idemclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// keyPlace is where the operations of a redirect test carry their key.
type keyPlace struct {
	name string
	in   key.In
	key  string // header or query name, or body pointer
}

var keyPlaces = []keyPlace{
	{"header", key.InHeader, "Idempotency-Key"},
	{"query", key.InQuery, "idem"},
	{"body", key.InBody, "/idempotency_key"},
}

// keyOf reads the key of r where p carries it, leaving r's body readable.
func (p keyPlace) keyOf(r *http.Request) string {
	switch p.in {
	case key.InHeader:
		return r.Header.Get(p.key)
	case key.InQuery:
		return r.URL.Query().Get(p.key)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	var v struct {
		Key string `json:"idempotency_key"`
	}
	_ = json.Unmarshal(b, &v)
	return v.Key
}

func (p keyPlace) policy(id, path string) idem.Policy {
	return idemtest.Policy(id, path, func(pol *idem.Policy) {
		pol.Key, pol.TTL = idem.KeySource{In: p.in, Name: p.key}, time.Hour
	})
}

func (p keyPlace) operation(id, path string) idemclient.Operation {
	return idemclient.Operation{
		ID: id, Method: http.MethodPost, Path: path,
		Key: idemclient.Key{In: key.In(p.in), Name: p.key}, KeyMaxLength: 255, TTL: time.Hour,
	}
}

// hops records, in order, the path and key of every request that reaches
// the servers of a redirect test, and how often each handler ran.
type hops struct {
	mu   sync.Mutex
	seen []string // "path key"
	runs map[string]int
}

func (h *hops) saw(path, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, path+" "+key)
}

func (h *hops) ran(path string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs[path]++
}

// keys returns the distinct keys seen so far.
func (h *hops) keys() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ks := make(map[string]bool)
	for _, s := range h.seen {
		ks[s[strings.IndexByte(s, ' ')+1:]] = true
	}
	return ks
}

// protected is path behind the engine, recording what reaches it. A
// handler that loses its first answer lets the engine store it and then
// closes the connection instead of sending it.
func protected(t *testing.T, p keyPlace, h *hops, path string, handler http.HandlerFunc, loseFirst bool) http.Handler {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{p.policy("op"+path, path)},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	engine := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ran(path)
		handler(w, r)
	}))
	var lost atomic.Bool
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.saw(r.URL.Path, p.keyOf(r))
		if loseFirst && lost.CompareAndSwap(false, true) {
			engine.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
			return
		}
		engine.ServeHTTP(w, r)
	})
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// A call redirected by a 307 carries one key on every hop: the one its
// caller gave or the one the Transport chose for the first hop, wherever
// the operation carries it, to the same origin or another one, whether or
// not the table knows the redirect's target. The second hop's answer is
// lost, so the call fails; calling again with the key the Report gives
// (or, for a key the caller wrote into the URL, the same URL) meets the
// first hop's stored 307 and the second hop's stored 201: each handler
// runs once.
func TestRedirectKeepsTheKey(t *testing.T) {
	for _, p := range keyPlaces {
		for _, origin := range []string{"same origin", "other origin"} {
			for _, table := range []string{"both in the table", "target not in the table"} {
				t.Run(p.name+"/"+origin+"/"+table, func(t *testing.T) {
					testRedirectKeepsTheKey(t, p, origin == "other origin", table == "both in the table")
				})
			}
		}
	}
}

func testRedirectKeepsTheKey(t *testing.T, p keyPlace, otherOrigin, bothInTable bool) {
	h := &hops{runs: make(map[string]int)}
	b := protected(t, p, h, "/b", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"tr_1"}`)
	}, true)
	mux := http.NewServeMux()
	target := "/b"
	if otherOrigin {
		target = serve(t, b).URL + "/b"
	} else {
		mux.Handle("/b", b)
	}
	mux.Handle("/a", protected(t, p, h, "/a", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}, false))
	a := serve(t, mux)
	ops := []idemclient.Operation{p.operation("op/a", "/a")}
	if bothInTable {
		ops = append(ops, p.operation("op/b", "/b"))
	}
	// A connection per request, so that net/http cannot resend the lost
	// request by itself (it does on a kept-alive connection, for a request
	// with an Idempotency-Key header).
	base := &http.Transport{DisableKeepAlives: true}
	tr, err := idemclient.New(idemclient.Config{Operations: ops, MaxAttempts: 1, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	client := tr.Client()

	url := a.URL + "/a"
	if p.in == key.InQuery {
		url += "?idem=caller-key"
	}
	call := func(ctx context.Context) (rep idemclient.Report, status int, err error) {
		ctx = idemclient.WithReport(ctx, &rep)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"amount":5}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return rep, 0, err
		}
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
		return rep, res.StatusCode, nil
	}

	rep, _, err := call(context.Background())
	if err == nil {
		t.Fatalf("the first call succeeded (report %+v); want the lost answer of /b", rep)
	}
	if ks := h.keys(); len(ks) != 1 || ks[""] {
		t.Errorf("the hops of one call carried %q; want one key on every hop", h.seen)
	}
	if !h.keys()[rep.Key] {
		t.Errorf("the report names the key %q; the hops carried %q", rep.Key, h.seen)
	}

	again := idemclient.WithKey(context.Background(), rep.Key)
	if p.in == key.InQuery {
		again = context.Background() // the key is in the URL
	}
	rep, status, err := call(again)
	if err != nil || status != http.StatusCreated || !rep.Replayed {
		t.Fatalf("calling again: %d, %v, report %+v; want /b's stored 201", status, err, rep)
	}
	if ks := h.keys(); len(ks) != 1 {
		t.Errorf("a call and its retry carried %q; want one key throughout", h.seen)
	}
	if h.runs["/a"] != 1 || h.runs["/b"] != 1 {
		t.Errorf("handlers ran %v; want /a and /b once each (requests %q)", h.runs, h.seen)
	}
}
