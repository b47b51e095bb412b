package gocode

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"
)

// commentText makes text from the spec (an operationId, a path, a summary,
// a key name) safe to stand in a // comment. A spec is untrusted input, and
// a comment is the one place in the generated file where its text is not
// quoted by strconv, so nothing in it may end the comment, start another,
// or hide what the line says from a reviewer:
//
//   - every kind of line break and other white space becomes a space, so
//     the text cannot leave its line;
//   - "/*", "*/" and "//" get a space between their characters, so no line
//     of the comment opens or closes a comment whatever the wrapping does;
//   - control characters and Unicode format characters (the bidi overrides
//     and isolates U+202A–U+202E and U+2066–U+2069, zero-width joiners, the
//     byte-order mark) are written as \uXXXX, so they can neither reorder
//     the line on screen (the "Trojan Source" trick) nor vanish from it;
//   - "+build" gets a space, so a wrapped line never reads as a build
//     constraint.
//
// Go string literals need no such care: jennifer writes them with
// strconv.Quote, which escapes every character that is not printable.
func commentText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	var last rune
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size == 1:
			r = unicode.ReplacementChar
		case unicode.IsSpace(r):
			r = ' '
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs):
			fmt.Fprintf(&b, `\u%04X`, r)
			last = 'u'
			continue
		}
		if (last == '/' && (r == '*' || r == '/')) || (last == '*' && r == '/') {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
		last = r
	}
	return strings.ReplaceAll(b.String(), "+build", "+ build")
}

// commenter is what a comment can be added to: a file or a group of
// declarations.
type commenter interface {
	Comment(string) *jen.Statement
}

// comment adds text as // comment lines of at most width bytes to c. Every
// line is handed to jennifer already starting with "// ", which it writes
// as given: a line that began with "/*" or "//" of its own would otherwise
// be written as raw source.
func comment(c commenter, text string, width int) {
	for _, line := range wrap(text, width) {
		c.Comment("// " + line)
	}
}
