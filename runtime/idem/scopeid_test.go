package idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// deploy is one version of a service: an engine with its policies over a
// store that outlives it, as a database outlives a deploy.
type deploy struct {
	server http.Handler
	runs   *atomic.Int64
}

func newDeploy(t *testing.T, store *memstore.Store, runs *atomic.Int64, policies ...idem.Policy) deploy {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store:    store,
		Policies: policies,
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	return deploy{runs: runs, server: e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	}))}
}

func (d deploy) post(t *testing.T, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	d.server.ServeHTTP(w, r)
	return w
}

// TestRenamedOperationKeepsItsStoredKeys: a request made before a deploy
// that renamed its operation, retried after it, is replayed when the new
// policy names the old operation ID as ScopeID, under either scope; and
// runs again (operation scope) or is refused as a reused key (tenant
// scope) without it, which is the hazard the alias exists for.
func TestRenamedOperationKeepsItsStoredKeys(t *testing.T) {
	for _, scope := range []idem.Scope{idem.ScopeOperation, idem.ScopeTenant} {
		t.Run(string(scope), func(t *testing.T) {
			before := transferPolicy()
			before.Scope = scope
			renamed := before
			renamed.OperationID = "makeTransfer"
			aliased := renamed
			aliased.ScopeID = before.OperationID

			store := memstore.New()
			var runs atomic.Int64
			expect(t, newDeploy(t, store, &runs, before).post(t, "k1"), http.StatusCreated, "")

			w := newDeploy(t, store, &runs, aliased).post(t, "k1")
			expect(t, w, http.StatusCreated, "")
			if w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
				t.Fatalf("with ScopeID: replayed %q, %d runs; want a replay and 1 run", w.Header().Get("Idempotent-Replayed"), runs.Load())
			}

			w = newDeploy(t, store, &runs, renamed).post(t, "k1")
			if scope == idem.ScopeTenant {
				expect(t, w, http.StatusUnprocessableEntity, problem.KeyReused)
			} else if runs.Load() != 2 {
				t.Fatalf("without ScopeID: %d runs, want the handler to run again (2)", runs.Load())
			}
		})
	}
}

// TestNewRefusesTwoOperationsUnderOneStoredName: a key sent to both would
// replay one operation's answer for the other.
func TestNewRefusesTwoOperationsUnderOneStoredName(t *testing.T) {
	a := transferPolicy()
	b := adoptionPolicy()
	b.ScopeID = a.OperationID
	_, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{a, b},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err == nil || !strings.Contains(err.Error(), "one name") {
		t.Fatalf("New = %v, want a refusal of two operations under one stored name", err)
	}
}
