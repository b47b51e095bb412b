package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// After a secret rotation (Secrets = newest first, the old one kept as
// Config.EffectSecret as docs/semantics.md §8.1 says), a fail-closed request whose
// handler recorded its charge phase and then died is left indeterminate.
// docs/effects.md says the operator decides with `idemgen keys show`,
// whose phases "tell which calls it made". show, given both secrets,
// must not print an empty list for it, which reads as "no charge".
func TestAttackKeysShowPhasesAfterRotation(t *testing.T) {
	ks := sqliteKeysStore(t)
	dir := t.TempDir()
	newest := []byte("keys-cli-store-secret-newest-0123")
	oldest := []byte("keys-cli-store-secret-oldest-4567")
	newFile, oldFile := writeSecretFile(t, dir, "new", newest), writeSecretFile(t, dir, "old", oldest)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) {
			return []byte("ch_1"), nil
		}); err != nil {
			t.Errorf("phase: %v", err)
		}
		panic("died after the charge")
	})
	// die sends a request with key k through an engine under secrets,
	// whose handler records its charge and dies.
	die := func(k string, secrets ...[]byte) {
		e, err := idem.New(idem.Config{
			Store:   ks.store,
			Secrets: secrets,
			// The secret listed alone before the rotation.
			EffectSecret: oldest,
			Policies:     []idem.Policy{keysPolicy()},
			Tenant:       func(*http.Request) (string, bool) { return "acme", true },
		})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", k)
		e.Middleware(handler).ServeHTTP(httptest.NewRecorder(), r)
	}
	die("died-0", oldest) // before the rotation
	die("died-1", newest, oldest)

	// The phase is recorded under the key and fingerprint as the effect
	// secret (the oldest) stores them; the row holds them under the
	// newest, and the fingerprint under the effect secret cannot be had
	// from it. show must say
	// that it cannot list the phases rather than print none, by --key and
	// by --label alike.
	const unlisted = "phases: phases cannot be listed for a key written under a secret other than the effect secret (the last --secret-file)"
	flags := []string{"--secret-file", newFile, "--secret-file", oldFile}
	for _, which := range [][]string{
		{"--tenant", "acme", "--scope", "createTransfer", "--key", "died-1"},
		{"--label", idemstore.KeyLabel(newest, "died-1")},
	} {
		code, out, errOut := keys(t, ks.url, "", append(append([]string{"show"}, which...), flags...)...)
		if code != 0 {
			t.Fatalf("show %v: exit %d\n%s%s", which, code, out, errOut)
		}
		if !strings.Contains(out, unlisted) {
			t.Errorf("show %v of a key written after a rotation does not say its phases cannot be listed, though its request recorded the charge:\n%s", which, out)
		}
		code, out, errOut = keys(t, ks.url, "", append(append([]string{"show", "--json"}, which...), flags...)...)
		if code != 0 || !strings.Contains(out, `"phases_note"`) {
			t.Errorf("show --json %v: exit %d; no phases_note:\n%s%s", which, code, out, errOut)
		}
	}

	// A key written under the oldest secret, before the rotation, has its
	// phases listed with no note; by --key show knows it was.
	code, out, errOut := keys(t, ks.url, "", append([]string{"show", "--tenant", "acme", "--scope", "createTransfer", "--key", "died-0"}, flags...)...)
	if code != 0 || !strings.Contains(out, "charge") || strings.Contains(out, "cannot be listed") {
		t.Errorf("show --key of a key written under the oldest secret: exit %d; want its charge listed and no note:\n%s%s", code, out, errOut)
	}
}
