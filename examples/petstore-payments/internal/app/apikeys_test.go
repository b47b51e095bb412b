package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A malformed API_KEYS entry stops the service with an error that names
// the entry's place but never its text, which may be a key: the error
// goes to a log that more people read than hold the keys.
func TestMalformedAPIKeyIsNotLogged(t *testing.T) {
	const secret = "sk_live_4f9c2e7a1b"
	file := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(file, []byte("good=acme\n# a comment\n"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		entry string
	}{
		{[]string{"--api-keys", "good=acme," + secret}, "entry 2 "},
		{[]string{"--api-keys", "good=acme," + secret + "="}, "entry 2 "},
		{[]string{"--api-keys", secret + " =,good=acme"}, "entry 1 "},
		{[]string{"--api-keys-file", file}, "entry 3 "},
	} {
		var logs bytes.Buffer
		if code := Main(tc.args, &logs); code == 0 {
			t.Errorf("%q: the service started", tc.args)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("%q: the log shows the malformed entry: %s", tc.args, logs.String())
		}
		if !strings.Contains(logs.String(), tc.entry) {
			t.Errorf("%q: the log does not name %s: %s", tc.args, tc.entry, logs.String())
		}
	}
}
