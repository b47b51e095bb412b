package cli

import (
	"strings"
	"testing"
)

// A database URL's password never reaches the terminal, whatever the
// URL's spelling: an upper-case or unusual scheme, a key=value DSN, or a
// string that names no store at all. Each points at a closed port, so
// every one of them fails, and its error is what an operator sees.
func TestKeysNeverPrintTheDatabasePassword(t *testing.T) {
	const password = "pw-s3cr3t-9f2c"
	t.Setenv(envLabelSecret, testSecret)
	for _, url := range []string{
		"POSTGRES://app:" + password + "@127.0.0.1:1/db?connect_timeout=2",
		"PostgreSQL://app:" + password + "@127.0.0.1:1/db?connect_timeout=2",
		"postgres:/app:" + password + "@127.0.0.1:1/db",
		"postgres:app:" + password + "@127.0.0.1:1/db",
		"host=127.0.0.1 port=1 user=app password=" + password + " dbname=db connect_timeout=2",
		"host=127.0.0.1 port=1 password='" + password + " with space' connect_timeout=2",
		"mysql://app:" + password + "@127.0.0.1:1/db",
		"sqlite:/nonexistent/app:" + password + "@host/db",
		"postgres://app:" + password + " with space@[::1/db",
	} {
		code, out, errOut := keys(t, url, "", "list")
		if code == 0 {
			t.Errorf("%q: listed keys, want a failure", url)
		}
		if strings.Contains(out+errOut, password) {
			t.Errorf("exit %d: the password is printed: stdout %q, stderr %q", code, out, errOut)
		}
	}
}
