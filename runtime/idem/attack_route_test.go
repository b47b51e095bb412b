package idem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// These tests attack the engine's routing from outside, as an
// application's router would treat a request.

// echoPath answers 201 with the path the router served, so that a replay
// of another resource's answer shows.
func echoPath(runs *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, r.URL.Path)
	}
}

// Engine.Handler reads the path parameters that enter the fingerprint by
// matching its template against the end of the path, "so any mount prefix
// works". A prefix with a wildcard of the router's own names a resource
// too: one key on /accounts/A/transfers and then /accounts/B/transfers
// replayed A's answer to B, and B's transfer never ran. Same for a
// {rest...} wildcard that swallows segments before the template.
func TestAttackHandlerUnderAWildcardPrefix(t *testing.T) {
	cases := []struct {
		name, pattern, template string
		params                  []string
		first, second           string
	}{
		{"parameter prefix", "POST /accounts/{acct}/transfers", "/transfers", nil,
			"/accounts/A/transfers", "/accounts/B/transfers"},
		{"rest wildcard", "POST /files/{rest...}", "/files/{name}", []string{"name"},
			"/files/x/files/y", "/files/z/files/y"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("op", tc.template, tc.params...)}})
			mux := http.NewServeMux()
			mux.Handle(tc.pattern, e.Handler("op", echoPath(&runs)))
			if w := post(t, mux, tc.first, "k1"); w.Code != http.StatusCreated || w.Body.String() != tc.first {
				t.Fatalf("first = %d %q", w.Code, w.Body)
			}
			w := post(t, mux, tc.second, "k1")
			if w.Header().Get("Idempotent-Replayed") == "true" {
				t.Fatalf("%s replayed the answer of %s (%q): one key, two resources", tc.second, tc.first, w.Body)
			}
			expect(t, w, http.StatusUnprocessableEntity, "idempotency-key-reused")
			// The same prefix is still the same request.
			if w := post(t, mux, tc.first, "k1"); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != tc.first {
				t.Fatalf("retry of %s = %d %q, want its replay", tc.first, w.Code, w.Body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}

// A prefix that Config.BasePath names is the mount, not a resource: the
// fingerprint is the one the middleware computes, so the two mountings
// share their keys.
func TestAttackHandlerUnderBasePathSharesKeysWithTheMiddleware(t *testing.T) {
	var runs atomic.Int64
	p := pathPolicy("adoptPet", "/pets/{pet_id}/adoptions", "pet_id")
	e := newEngine(t, idem.Config{Policies: []idem.Policy{p}, BasePath: "/v1"})
	perRoute := http.NewServeMux()
	perRoute.Handle("POST /v1/pets/{pet_id}/adoptions", e.Handler("adoptPet", echoPath(&runs)))
	behind := e.Middleware(echoPath(&runs))
	if w := post(t, perRoute, "/v1/pets/A/adoptions", "k1"); w.Code != http.StatusCreated {
		t.Fatalf("first = %d %s", w.Code, w.Body)
	}
	if w := post(t, behind, "/v1/pets/A/adoptions", "k1"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same request behind the middleware = %d %s, want a replay", w.Code, w.Body)
	}
}

// Requests that reach a per-route handler of another method pass through
// it untouched; a method-less route hands the protected handler every
// method. Case matters to ServeMux and chi alike, so "post" never reaches
// a "POST" route.
func TestAttackMethodSpellingNeverReachesAPostRoute(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", e.Handler("createTransfer", created(&runs)))
	for _, m := range []string{"post", "Post", "HEAD", "OPTIONS", "PUT"} {
		r := httptest.NewRequest(m, "/transfers", strings.NewReader(`{}`))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if runs.Load() != 0 {
			t.Fatalf("%s /transfers ran the POST handler (%d)", m, w.Code)
		}
	}
}

// ServeMux has no mixed segments, so an API with Google-style custom
// methods ("/files/{name}:cancel") mounts "POST /files/{spec}" and splits
// the value itself, at the last ":" as AIP-136 reads it. The engine cut
// "a:b:cancel" at the first ":", found no match and passed the request
// through: the cancel of "a:b" ran unprotected, twice under one key, and
// without the key its policy requires. A segment that the template
// matches only under another split is refused, like every path routers
// may read two ways.
func TestAttackMixedSegmentSplitElsewhere(t *testing.T) {
	var runs atomic.Int64
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("cancelFile", "/files/{name}:cancel", "name")}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /files/{spec}", func(w http.ResponseWriter, r *http.Request) {
		spec := r.PathValue("spec")
		i := strings.LastIndexByte(spec, ':')
		if i < 0 || spec[i+1:] != "cancel" {
			http.NotFound(w, r)
			return
		}
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	h := e.Middleware(mux)
	for _, key := range []string{"k1", "k1", ""} {
		w := post(t, h, "/files/a:b:cancel", key)
		if w.Code == http.StatusCreated && w.Header().Get("Idempotent-Replayed") != "true" && runs.Load() > 1 {
			t.Fatalf("key %q: the handler ran %d times", key, runs.Load())
		}
		if key == "" && w.Code == http.StatusCreated {
			t.Fatalf("a keyless request ran although the policy requires a key")
		}
	}
	// The canonical form is protected as always.
	if w := post(t, h, "/files/a:cancel", "k2"); w.Code != http.StatusCreated {
		t.Fatalf("canonical request = %d %s", w.Code, w.Body)
	}
	if w := post(t, h, "/files/a:cancel", "k2"); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("its retry = %d %s, want a replay", w.Code, w.Body)
	}
}
