package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
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

// dieAfterCharge is a handler that records its charge phase and dies, as a
// fail-closed request left indeterminate does.
func dieAfterCharge(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) {
			return []byte("ch_1"), nil
		}); err != nil {
			t.Errorf("phase: %v", err)
		}
		panic("died after the charge")
	})
}

// sendTransfer sends a transfer with key k through an engine of cfg
// (store, secrets) in front of h.
func sendTransfer(t *testing.T, cfg idem.Config, h http.Handler, k string) {
	cfg.Policies = []idem.Policy{keysPolicy()}
	cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 100}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", k)
	e.Middleware(h).ServeHTTP(httptest.NewRecorder(), r)
}

// showPhases runs show with args and returns its output, failing the test
// unless it succeeds.
func showPhases(t *testing.T, url string, args ...string) string {
	t.Helper()
	code, out, errOut := keys(t, url, "", append([]string{"show"}, args...)...)
	if code != 0 {
		t.Fatalf("show %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out
}

// A row's phases are recorded under its key and fingerprint as the effect
// secret stores them: after a rotation (Secrets newest first, the old one
// kept as Config.EffectSecret, docs/semantics.md §8.1) a row written under
// the newest holds them as another secret does, and the fingerprint under
// the effect secret cannot be had from it. show says that the phases of
// such a row cannot be listed, by --key and by --label, rather than print
// none, which an operator resolving a fail-closed key reads as "no
// charge"; and lists those of a row written under the effect secret.
func TestKeysShowSaysPhasesCannotBeListedForARowUnderANewerSecret(t *testing.T) {
	ks := sqliteKeysStore(t)
	dir := t.TempDir()
	newest := []byte("keys-cli-store-secret-newest-0123")
	oldest := []byte("keys-cli-store-secret-oldest-4567")
	newFile, oldFile := writeSecretFile(t, dir, "new", newest), writeSecretFile(t, dir, "old", oldest)
	die := dieAfterCharge(t)
	sendTransfer(t, idem.Config{Store: ks.store, Secrets: [][]byte{oldest}, EffectSecret: oldest}, die, "died-0") // before the rotation
	sendTransfer(t, idem.Config{Store: ks.store, Secrets: [][]byte{newest, oldest}, EffectSecret: oldest}, die, "died-1")

	flags := []string{"--secret-file", newFile, "--secret-file", oldFile, "--effect-secret-file", oldFile}
	byKey := []string{"--tenant", "acme", "--scope", "createTransfer", "--key", "died-1"}
	byLabel := []string{"--label", idemstore.KeyLabel(newest, "died-1")}
	for _, c := range []struct {
		which []string
		note  string
	}{{byKey, phasesOther}, {byLabel, phasesOtherMaybe}} {
		args := slices.Concat(c.which, flags)
		if out := showPhases(t, ks.url, args...); !strings.Contains(out, "phases: "+c.note+"\n") {
			t.Errorf("show %v of a key written after a rotation does not say %q, though its request recorded the charge:\n%s", args, c.note, out)
		}
		if out := showPhases(t, ks.url, append(args, "--json")...); !strings.Contains(out, `"phases_note"`) {
			t.Errorf("show --json %v: no phases_note:\n%s", args, out)
		}
	}
	// Without the effect secret stated, show cannot tell where to look.
	if out := showPhases(t, ks.url, slices.Concat(byKey, flags[:4])...); !strings.Contains(out, phasesUnstated) {
		t.Errorf("show --key without --effect-secret-file of a key written after a rotation does not say %q:\n%s", phasesUnstated, out)
	}
	// A key written under the effect secret, before the rotation, has its
	// phases listed with no note, the effect secret stated or not.
	for _, f := range [][]string{flags, flags[:4]} {
		out := showPhases(t, ks.url, slices.Concat([]string{"--tenant", "acme", "--scope", "createTransfer", "--key", "died-0"}, f)...)
		if !strings.Contains(out, "charge") || strings.Contains(out, phasesCannot) {
			t.Errorf("show --key %v of a key written under the effect secret: want its charge listed and no note:\n%s", f, out)
		}
	}
}

// A deployment that turned secrets on as docs/runtime.md ("Rotation") says
// (Secrets [secret, nil], then [secret], with Config.UnkeyedEffectKeys
// kept for good) records every request's phases under its key and
// fingerprint in clear, while its rows hold them as the secret's HMACs,
// from which they cannot be had. show, given the one secret, with
// --unkeyed-effect-keys or without it, says that the phases cannot be
// listed; it never prints a row with no phases and no note, which an
// operator reads as "the charge was not made".
func TestKeysShowSaysPhasesCannotBeListedUnderUnkeyedEffectKeys(t *testing.T) {
	ks := sqliteKeysStore(t)
	secret := []byte("keys-cli-store-secret-turned-on-0123")
	secretFile := writeSecretFile(t, t.TempDir(), "secret", secret)
	die := dieAfterCharge(t)
	sendTransfer(t, idem.Config{Store: ks.store, Secrets: [][]byte{secret, nil}, UnkeyedEffectKeys: true}, die, "died-on") // while turning secrets on
	sendTransfer(t, idem.Config{Store: ks.store, Secrets: [][]byte{secret}, UnkeyedEffectKeys: true}, die, "died-after")   // once the empty entry is removed

	for _, k := range []string{"died-on", "died-after"} {
		which := []string{"--tenant", "acme", "--scope", "createTransfer", "--key", k, "--secret-file", secretFile}
		for _, c := range []struct {
			flags []string
			note  string
		}{{nil, phasesUnstated}, {[]string{"--unkeyed-effect-keys"}, phasesOther}} {
			if out := showPhases(t, ks.url, slices.Concat(which, c.flags)...); !strings.Contains(out, "phases: "+c.note+"\n") {
				t.Errorf("show --key %s %v of a deployment with UnkeyedEffectKeys does not say %q, though its request recorded the charge:\n%s", k, c.flags, c.note, out)
			}
		}
	}
	code, _, errOut := keys(t, ks.url, "", "show", "--tenant", "acme", "--scope", "createTransfer", "--key", "died-on",
		"--unkeyed-effect-keys", "--effect-secret-file", secretFile)
	if code == 0 || !strings.Contains(errOut, "both") {
		t.Errorf("show with --unkeyed-effect-keys and --effect-secret-file: exit %d, %s; want both refused", code, errOut)
	}
}

// A deployment without store secrets that sets Config.EffectSecret keeps
// its rows' keys and fingerprints in clear and records its phases under
// them as the effect secret stores them, which follow from the row's.
// show given the effect secret lists the charge; given it as a store
// secret, it says the phases cannot be listed, or finds no such key:
// never a row with no phases and no note.
func TestKeysShowListsPhasesOfARowInClearUnderAnEffectSecret(t *testing.T) {
	ks := sqliteKeysStore(t)
	dir := t.TempDir()
	effect := []byte("keys-cli-effect-secret-only-0123456")
	effectFile := writeSecretFile(t, dir, "effect", effect)
	emptyFile := writeSecretFile(t, dir, "empty", nil)
	sendTransfer(t, idem.Config{Store: ks.store, EffectSecret: effect}, dieAfterCharge(t), "died-clear")

	which := []string{"--tenant", "acme", "--scope", "createTransfer", "--key", "died-clear"}
	for _, flags := range [][]string{
		{"--effect-secret-file", effectFile},
		{"--secret-file", emptyFile, "--effect-secret-file", effectFile},
	} {
		out := showPhases(t, ks.url, slices.Concat(which, flags)...)
		if !strings.Contains(out, "charge") || strings.Contains(out, phasesCannot) {
			t.Errorf("show %v of a row in clear: want its charge listed under the effect secret, and no note:\n%s", flags, out)
		}
	}
	for _, flags := range [][]string{
		{"--secret-file", emptyFile, "--secret-file", effectFile},
		{"--secret-file", effectFile},
	} {
		code, out, errOut := keys(t, ks.url, "", slices.Concat([]string{"show"}, which, flags)...)
		if code == 0 && !strings.Contains(out, "charge") && !strings.Contains(out, phasesCannot) {
			t.Errorf("show %v prints the key with no phase and no note, though its request recorded the charge:\n%s%s", flags, out, errOut)
		}
	}
}
