package cli

import (
	"strings"
	"testing"
)

// A filter given empty (a script's unset variable) or a flag that the
// command would ignore is a usage error, never a wider selection than the
// operator wrote: `--tenant "$T"` with T unset must not list, show or
// resolve across every tenant.
func TestKeysEmptyOrIgnoredFlagsAreRefused(t *testing.T) {
	t.Setenv(envLabelSecret, testSecret)
	st := sqliteKeysStore(t)
	putHostileRow(t, st.store)
	for _, args := range [][]string{
		{"list", "--tenant", ""},
		{"list", "--operation", ""},
		{"list", "--label", ""},
		{"list", "--limit", "-1"},
		{"list", "--older-than", "-1h"},
		{"list", "--expiring-within", "-1h"},
		{"show", "--label", "hmac:00000000000000000000", "--tenant", ""},
		{"show", "--label", "hmac:00000000000000000000", "--operation", ""},
		{"show", "--label", "hmac:00000000000000000000", "--scope", "createTransfer"},
		{"show", "--tenant", "acme", "--scope", "createTransfer", "--key", "k", "--operation", "refund"},
		{"resolve", "--label", "hmac:00000000000000000000", "--tenant", "", "--expect", "v", "--forget", "--yes"},
	} {
		code, out, errOut := keys(t, st.url, "", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "--") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error", args, code, out, errOut)
		}
	}
}
