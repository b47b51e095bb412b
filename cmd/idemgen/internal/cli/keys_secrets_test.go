package cli

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
)

// With store secrets and sealing, the keys commands find a client's key
// and the key a log line names, read its body and resolve it, given the
// same secrets and seal keys as the service.
func TestKeysThroughSecretsAndSealKeys(t *testing.T) {
	ks := sqliteKeysStore(t)
	dir := t.TempDir()
	secret := []byte("keys-cli-store-secret-0123456789")
	sealKey := make([]byte, 32)
	for i := range sealKey {
		sealKey[i] = byte(i)
	}
	secretFile := writeSecretFile(t, dir, "secret", secret)
	sealFile := writeSecretFile(t, dir, "seal", []byte(hex.EncodeToString(sealKey)))
	sealer, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "s1", Key: sealKey})
	if err != nil {
		t.Fatal(err)
	}
	die := false
	e, err := idem.New(idem.Config{
		Store: ks.store, Secrets: [][]byte{secret}, Sealer: sealer,
		Policies: []idem.Policy{keysPolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	server := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if die {
			panic("died")
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"memo":"card 4111111111111111"}`))
	}))
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 100}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		server.ServeHTTP(w, r)
		return w
	}
	post("paid-1")
	die = true
	post("died-1")
	die = false

	flags := []string{"--secret-file", secretFile, "--seal-key", "s1=" + sealFile}
	code, out, errOut := keys(t, ks.url, "", append([]string{"show", "--tenant", "acme", "--scope", "createTransfer", "--key", "paid-1"}, flags...)...)
	if code != 0 || !strings.Contains(out, "4111111111111111") || !strings.Contains(out, idemstore.KeyLabel(secret, "paid-1")) {
		t.Fatalf("show by the client's key: exit %d\n%s%s", code, out, errOut)
	}
	// Without the seal keys the body stays sealed.
	code, out, _ = keys(t, ks.url, "", "show", "--tenant", "acme", "--scope", "createTransfer", "--key", "paid-1", "--secret-file", secretFile)
	if code != 0 || strings.Contains(out, "4111") || !strings.Contains(out, "sealed") {
		t.Fatalf("show without seal keys: exit %d\n%s", code, out)
	}

	label := idemstore.KeyLabel(secret, "died-1")
	code, out, errOut = keys(t, ks.url, "", append([]string{"show", "--label", label}, flags...)...)
	if code != 0 {
		t.Fatalf("show --label: exit %d\n%s%s", code, out, errOut)
	}
	version := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "version:" {
			version = f[1]
		}
	}
	code, out, errOut = keys(t, ks.url, "", append([]string{"resolve", "--label", label, "--expect", version, "--status", "201", "--body", `{"resolved":true}`, "--yes"}, flags...)...)
	if code != 0 {
		t.Fatalf("resolve: exit %d\n%s%s", code, out, errOut)
	}
	if w := post("died-1"); w.Code != http.StatusCreated || w.Body.String() != `{"resolved":true}` {
		t.Fatalf("retry after the resolution: %d %s", w.Code, w.Body)
	}
}

// writeSecretFile writes b and a newline, as an editor leaves a secret,
// to the file name in dir, and returns its path.
func writeSecretFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, append(append([]byte(nil), b...), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
