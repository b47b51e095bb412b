package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Under scope: tenant two operations share one key space, and a key
// reused for another operation is refused with 422 while its row stands
// (docs/semantics.md §3.5). Once the first operation's claim is released
// (a 503, which leaves its phases), the same key and body sent to the
// other operation claim the key afresh and run its handler, which must
// get effect keys and phases of its own (docs/semantics.md §8.1): not the
// payment's record returned by the payout's Phase("psp") without calling
// run.
func TestPhasesAndEffectKeysAreTheOperations(t *testing.T) {
	tenant := func(p *idem.Policy) { p.Scope = idem.ScopeTenant }
	e, err := idem.New(idem.Config{
		Store: memstore.New(),
		Policies: []idem.Policy{
			idemtest.Policy("createPayment", "/payments", tenant),
			idemtest.Policy("createPayout", "/payouts", tenant),
		},
		Tenant:  idem.SingleTenant("t1"),
		Secrets: [][]byte{[]byte("0123456789abcdef0123456789abcdef")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var runs []string
	handler := func(what string, status int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ek, err := idem.EffectKey(r.Context(), "psp")
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, ek)
			res, err := idem.Phase(r.Context(), "psp", func(context.Context, string) ([]byte, error) {
				runs = append(runs, what)
				return []byte(what + "-done"), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			w.WriteHeader(status)
			_, _ = w.Write(res)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", handler("payment", http.StatusServiceUnavailable))
	mux.Handle("POST /payouts", handler("payout", http.StatusCreated))
	srv := e.Middleware(mux)

	send := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100,"currency":"EUR"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k-shared")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	if w := send("/payments"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("payment: %d %s", w.Code, w.Body)
	}
	w := send("/payouts")
	t.Logf("payout answered %d %q; runs %v", w.Code, w.Body, runs)
	if len(keys) == 2 && keys[0] == keys[1] {
		t.Errorf("createPayment and createPayout got one effect key %s for the same key and body: each operation's effects are its own", keys[0])
	}
	if len(runs) != 2 {
		t.Errorf("createPayout's Phase(\"psp\") did not run: it returned createPayment's record %q (runs %v)", w.Body, runs)
	}
}
