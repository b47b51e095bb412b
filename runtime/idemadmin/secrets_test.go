package idemadmin_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// The operator finds, reads and resolves keys through the deployment's
// secrets and sealer, whichever secret a row was written under.
func TestAdminThroughSecretsAndSealer(t *testing.T) {
	ctx := context.Background()
	oldSecret, newSecret := []byte("admin-old-secret-0123456789"), []byte("admin-new-secret-9876543210")
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	for name, mk := range map[string]func(*testing.T) adminStore{
		"sqlite":   func(t *testing.T) adminStore { return newSQLite(t, c) },
		"postgres": newPostgres,
	} {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			sealer, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: bytes.Repeat([]byte{9}, 32)})
			if err != nil {
				t.Fatal(err)
			}
			serve := func(secrets ...[]byte) http.Handler {
				e, err := idem.New(idem.Config{
					Store: s, Secrets: secrets, Sealer: sealer,
					EffectSecret: oldSecret, // the secret listed alone before the rotation
					Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
						p.TTL, p.MaxSnapshotBytes = time.Hour, 1<<16
					})},
					Tenant: func(*http.Request) (string, bool) { return "acme", true },
				})
				if err != nil {
					t.Fatal(err)
				}
				return e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Idempotency-Key") == "crash-1" {
						panic("crash")
					}
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte(`{"memo":"card 4111111111111111"}`))
				}))
			}
			post := func(h http.Handler, key string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			before := serve(oldSecret)
			post(before, "done-1")
			post(before, "crash-1") // fail-closed: left indeterminate

			// After rotation the operator holds both secrets.
			a := idemadmin.New(s, newSecret, oldSecret).WithSealer(sealer)
			id := idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: "done-1"}
			e, err := a.Show(ctx, id)
			if err != nil {
				t.Fatalf("Show by the client's key: %v", err)
			}
			if e.Key == "done-1" || e.Sealed || string(e.Body) != `{"memo":"card 4111111111111111"}` {
				t.Fatalf("shown %q sealed=%v body %q", e.Key, e.Sealed, e.Body)
			}
			if want := idemstore.KeyLabel(oldSecret, "done-1"); e.Label != want {
				t.Fatalf("label %s, want %s (the label the engine logged)", e.Label, want)
			}
			// Without the sealer the body is not shown in clear.
			if e, err := idemadmin.New(s, newSecret, oldSecret).Show(ctx, id); err != nil || !e.Sealed || bytes.Contains(e.Body, []byte("4111")) {
				t.Fatalf("without the sealer: sealed=%v body %q err %v", e.Sealed, e.Body, err)
			}

			crashed, err := a.Find(ctx, idemstore.KeyLabel(oldSecret, "crash-1"), idemadmin.Query{})
			if err != nil {
				t.Fatalf("Find by the logged label: %v", err)
			}
			if err := a.Resolve(ctx, crashed.Identity, crashed.Version, idemstore.Response{Status: http.StatusCreated, Body: []byte(`{"resolved":true}`)}); err != nil {
				t.Fatal(err)
			}
			// The resolution is sealed like the engine's own answers, so the
			// engine (now writing under the new secret) replays it.
			after := serve(newSecret, oldSecret)
			w := post(after, "crash-1")
			if w.Code != http.StatusCreated || w.Body.String() != `{"resolved":true}` {
				t.Fatalf("retry after the resolution: %d %s", w.Code, w.Body)
			}
		})
	}
}
