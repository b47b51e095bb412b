package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// show lists the recovery points a key's request recorded.
func TestKeysShowPhases(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	eachKeysStore(t, func(t *testing.T, st keysStore) {
		e, err := idem.New(idem.Config{
			Store:          st.store,
			Policies:       []idem.Policy{idemtest.Policy("createTransfer", "/transfers")},
			Tenant:         func(*http.Request) (string, bool) { return "acme", true },
			KeyLabelSecret: []byte(testSecret),
		})
		if err != nil {
			t.Fatal(err)
		}
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) { return []byte("ch_1"), nil })
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":5}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "order-7")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Fatalf("request: %d %s", rec.Code, rec.Body)
		}
		label := idemstore.KeyLabel([]byte(testSecret), "order-7")
		code, out, errOut := st.keys(t, "", "show", "--label", label)
		if code != 0 || !strings.Contains(out, "phases:") || !strings.Contains(out, "charge") {
			t.Fatalf("show: exit %d, stdout %s, stderr %s; want the charge phase", code, out, errOut)
		}
		code, out, _ = st.keys(t, "", "show", "--label", label, "--json")
		var shown jsonShown
		if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || len(shown.Phases) != 1 ||
			shown.Phases[0].Name != "charge" || shown.Phases[0].Bytes != len("ch_1") {
			t.Fatalf("show --json: exit %d, %s; want the charge phase of 4 bytes", code, out)
		}
	})
}
