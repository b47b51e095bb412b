package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// effectServer is an engine over store whose handler asks for the effect
// key of the effect named by the request's X-Effect header, writes it as
// its answer, and answers the X-Status header's status (201 by default).
func effectServer(t *testing.T, store idemstore.Store, secrets [][]byte, policies ...idem.Policy) http.Handler {
	t.Helper()
	if len(policies) == 0 {
		policies = []idem.Policy{idemtest.Policy("charge", "/charges")}
	}
	e, err := idem.New(idem.Config{
		Store:    store,
		Policies: policies,
		Tenant:   func(r *http.Request) (string, bool) { v := r.Header.Get("X-Tenant"); return v, v != "" },
		Secrets:  secrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := idem.EffectKey(r.Context(), r.Header.Get("X-Effect"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status := http.StatusCreated
		if r.Header.Get("X-Status") == "500" {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(k))
	}))
}

// effectKeyOfBody is effectKeyOf for a request with body, answered 201.
func effectKeyOfBody(t *testing.T, h http.Handler, path, tenant, key, effect, body string) string {
	t.Helper()
	return effectKeyWith(t, h, path, tenant, key, effect, body, http.StatusCreated)
}

// effectKeyOf sends one request and returns the effect key its handler
// got; status 500 leaves the key free for a retry.
func effectKeyOf(t *testing.T, h http.Handler, path, tenant, key, effect string, status int) string {
	t.Helper()
	return effectKeyWith(t, h, path, tenant, key, effect, `{}`, status)
}

func effectKeyWith(t *testing.T, h http.Handler, path, tenant, key, effect, body string, status int) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tenant", tenant)
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("X-Effect", effect)
	if status == http.StatusInternalServerError {
		r.Header.Set("X-Status", "500")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != status {
		t.Fatalf("%s %s key %q effect %q: status %d, want %d; body %s", tenant, path, key, effect, w.Code, status, w.Body)
	}
	return w.Body.String()
}

var effectKeyForm = regexp.MustCompile(`^[0-9a-f]{40}$`)

func TestEffectKeyStableAcrossRunsAndEngines(t *testing.T) {
	secret := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	for _, tc := range []struct {
		name    string
		secrets [][]byte
	}{{"clear", nil}, {"secret", secret}} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			first := effectServer(t, store, tc.secrets)
			// A run that answers 500 releases the key; the retry, in
			// another engine (another process), runs the handler again.
			k1 := effectKeyOf(t, first, "/charges", "acme", "order-1", "charge", 500)
			second := effectServer(t, store, tc.secrets)
			k2 := effectKeyOf(t, second, "/charges", "acme", "order-1", "charge", 201)
			if k1 != k2 {
				t.Fatalf("effect key changed between runs: %q then %q", k1, k2)
			}
			if !effectKeyForm.MatchString(k1) || len(k1) != idem.EffectKeyLength {
				t.Fatalf("effect key %q is not %d hex digits", k1, idem.EffectKeyLength)
			}
			// A fresh store (a restart with the row gone) derives the
			// same key: nothing of it is stored.
			third := effectServer(t, memstore.New(), tc.secrets)
			if k3 := effectKeyOf(t, third, "/charges", "acme", "order-1", "charge", 201); k3 != k1 {
				t.Fatalf("effect key differs in a new engine and store: %q, want %q", k3, k1)
			}
		})
	}
}

func TestEffectKeyDiffersByEveryPart(t *testing.T) {
	secret := [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	other := [][]byte{[]byte("fedcba9876543210fedcba9876543210")}
	policies := []idem.Policy{idemtest.Policy("charge", "/charges"), idemtest.Policy("payout", "/payouts")}
	h := effectServer(t, memstore.New(), secret, policies...)
	seen := map[string]string{}
	add := func(what, k string) {
		t.Helper()
		if prev, dup := seen[k]; dup {
			t.Fatalf("%s has the effect key of %s: %q", what, prev, k)
		}
		seen[k] = what
	}
	add("base", effectKeyOf(t, h, "/charges", "acme", "order-1", "charge", 201))
	add("tenant", effectKeyOf(t, h, "/charges", "globex", "order-1", "charge", 201))
	add("scope", effectKeyOf(t, h, "/payouts", "acme", "order-1", "charge", 201))
	add("key", effectKeyOf(t, h, "/charges", "acme", "order-2", "charge", 201))
	add("name", effectKeyOf(t, h, "/charges", "acme", "order-3", "charge", 201))
	add("name", effectKeyOf(t, h, "/charges", "acme", "order-3b", "refund", 201))
	// The same key reused for another request (another body) once the
	// store forgot it (here, a store of its own) names other effects.
	hExpired := effectServer(t, memstore.New(), secret, policies...)
	add("fingerprint", effectKeyOfBody(t, hExpired, "/charges", "acme", "order-1", "charge", `{"amount":2}`))
	hOther := effectServer(t, memstore.New(), other, policies...)
	add("secret", effectKeyOf(t, hOther, "/charges", "acme", "order-1", "charge", 201))
	hClear := effectServer(t, memstore.New(), nil, policies...)
	add("clear", effectKeyOf(t, hClear, "/charges", "acme", "order-1", "charge", 201))
	// Parts that would run into each other unprefixed (keys in clear):
	// key "order-1c" with name "harge" against key "order-1" with name
	// "charge".
	add("boundary", effectKeyOf(t, hClear, "/charges", "acme", "order-1c", "harge", 201))
	for k := range seen {
		for _, part := range []string{"acme", "order", "charge", "globex"} {
			if strings.Contains(k, part) {
				t.Fatalf("effect key %q shows %q", k, part)
			}
		}
	}
}

func TestEffectKeyOutsideAProtectedRequest(t *testing.T) {
	if _, err := idem.EffectKey(context.Background(), "charge"); !errors.Is(err, idem.ErrNotProtected) {
		t.Fatalf("EffectKey outside the engine: err = %v, want ErrNotProtected", err)
	}
	// A request of an operation whose key is optional, sent without one.
	optional := idemtest.Policy("charge", "/charges", func(p *idem.Policy) { p.Required = false })
	h := effectServer(t, memstore.New(), nil, optional)
	r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("X-Effect", "charge")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "carries no idempotency key") {
		t.Fatalf("keyless request: %d %s, want the handler's 400 naming the missing key", w.Code, w.Body)
	}
}

func TestEffectKeyRefusesBadNames(t *testing.T) {
	h := effectServer(t, memstore.New(), nil)
	for i, name := range []string{"", strings.Repeat("a", idem.MaxEffectName+1), "charge card", "charge\x00", "é"} {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Tenant", "acme")
		r.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(i))
		r.Header.Set("X-Effect", name)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), idem.ErrEffectName.Error()) {
			t.Errorf("name %q: %d %s, want the handler's 400 with ErrEffectName", name, w.Code, w.Body)
		}
	}
	if k := effectKeyOf(t, h, "/charges", "acme", "ok", strings.Repeat("a", idem.MaxEffectName), 201); !effectKeyForm.MatchString(k) {
		t.Fatalf("a name of %d bytes was refused: %s", idem.MaxEffectName, k)
	}
}
