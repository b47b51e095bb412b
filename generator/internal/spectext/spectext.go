// Package spectext puts text from a spec on one visible line, the common
// first step of every emitter's escaping: a spec is untrusted input, and
// what it says must reach a comment or a page as the text it is.
package spectext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Visible returns s on one line, as a reader should see it: white space of
// every kind (line and paragraph separators, NEL, tabs) becomes one space,
// leading and trailing space is dropped, and control characters, Unicode
// format characters (the bidi overrides and isolates U+202A–U+202E and
// U+2066–U+2069, zero-width characters, the byte-order mark), private-use
// and surrogate code points are written as \uXXXX, so they can neither
// break a layout nor reorder or hide what a line says (the "Trojan Source"
// trick). Invalid UTF-8 becomes U+FFFD.
func Visible(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			r = unicode.ReplacementChar
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs) {
			fmt.Fprintf(&b, `\u%04X`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
