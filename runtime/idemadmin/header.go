package idemadmin

import (
	"fmt"
	"net/http"
	"strings"
)

// checkHeader refuses a header no HTTP response can carry (RFC 9110
// §5.1, §5.5): a name that is not a token, or a value with a control
// character other than a tab. Stored, such a value would be replayed as
// the operator typed it, a line break and all.
func checkHeader(name string, values []string) error {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Errorf("idemadmin: header name %q is not an HTTP token", name)
	}
	for _, v := range values {
		if i := strings.IndexFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }); i >= 0 {
			return fmt.Errorf("idemadmin: header %s: value %q holds control character %q", http.CanonicalHeaderKey(name), v, v[i])
		}
	}
	return nil
}

// isTokenChar reports whether r may appear in an HTTP token.
func isTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	}
	return strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}
