package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// hostileTenant, hostileKey and hostileOperation are what a client (or a
// row written around the engine) can leave in the store: terminal escape
// sequences (OSC 52 writes the operator's clipboard), a carriage return
// that hides what precedes it, a bidi override, C1 controls, invalid
// UTF-8, and line breaks that forge rows of output.
const (
	hostileTenant    = "acme\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\u202e\xff"
	hostileKey       = "k-1\r\nhmac:00000000000000000000  acme  createTransfer  completed"
	hostileOperation = "createTransfer\n(no keys)\u009b2J"
)

// putHostileRow stores a completed key whose every client-written field
// is hostile, as a store takes it: stores do not vet what they keep.
func putHostileRow(t *testing.T, store idemstore.Store) {
	t.Helper()
	ctx := context.Background()
	id := idemstore.Identity{Tenant: hostileTenant, Scope: hostileOperation, Key: hostileKey}
	res, err := store.Claim(ctx, idemstore.Claim{
		Identity: id, Operation: hostileOperation, Fingerprint: []byte{1}, Token: "t1",
		Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.FailClosed,
	})
	if err != nil || !res.Won {
		t.Fatalf("claim: won %v, err %v", res.Won, err)
	}
	resp := idemstore.Response{Status: http.StatusCreated, Header: http.Header{
		"Content-Type":               {"text/plain"},
		"X-Note":                     {"ok\x1b[2J\x1b[H", "line\r\nstatus: 200"},
		"X-Evil\x1b[31m\nresolvable": {"true"},
	}, Body: []byte("refund failed\rtransfer paid \u202egnp.exe\u009b0m")}
	if err := store.Complete(ctx, id, "t1", resp); err != nil {
		t.Fatal(err)
	}
}

// terminalUnsafe reports what in out a terminal would interpret or that
// forges or hides output.
func terminalUnsafe(out string) string {
	if !utf8.ValidString(out) {
		return "invalid UTF-8"
	}
	for _, r := range out {
		switch {
		case r == '\r', r == 0x1b, r == 0x07, r >= 0x80 && r <= 0x9f, r == 0x7f:
			return fmt.Sprintf("control %U", r)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
			return "bidi control"
		}
	}
	return ""
}

// Stored tenants, keys, operations, headers and bodies reach the
// operator's terminal escaped: no escape sequence, carriage return, bidi
// override or C1 control gets through, and a line break in a field never
// forges a line of output. JSON stays valid and carries the values whole.
func TestKeysHostileRowsCannotDriveTheTerminal(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	st := sqliteKeysStore(t)
	putHostileRow(t, st.store)
	show := []string{"show", "--tenant", hostileTenant, "--scope", hostileOperation, "--key", hostileKey}

	for _, args := range [][]string{
		{"list"}, {"list", "--show-keys"}, {"stats"}, {"stats", "--show-keys"},
		show, append(show, "--show-keys"),
	} {
		code, out, errOut := keys(t, st.url, "", args...)
		if code != 0 {
			t.Fatalf("%s: exit %d, stderr %s", args[0], code, errOut)
		}
		if why := terminalUnsafe(out); why != "" {
			t.Errorf("%v prints %s to the terminal:\n%q", args, why, out)
		}
		if args[0] == "list" {
			if lines := strings.Count(out, "\n"); lines != 2 {
				t.Errorf("%v prints %d lines for one key (a header and a row expected):\n%s", args, lines, out)
			}
		}
	}

	code, out, errOut := keys(t, st.url, "", append(show, "--json", "--show-keys")...)
	var shown jsonEntry
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("show --json: exit %d, stderr %s, stdout %q", code, errOut, out)
	}
	if why := terminalUnsafe(out); why != "" {
		t.Errorf("show --json prints %s:\n%q", why, out)
	}
	if shown.Key != hostileKey || shown.Operation != hostileOperation || shown.Headers["X-Note"][1] != "line\r\nstatus: 200" {
		t.Errorf("show --json does not carry the stored values: %+v", shown)
	}
}
