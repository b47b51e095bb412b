package gocode

import (
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/spectext"
)

// commentText makes text from the spec (an operationId, a path, a summary,
// a key name) safe to stand in a // comment. A spec is untrusted input, and
// a comment is the one place in the generated file where its text is not
// quoted by strconv, so nothing in it may end the comment, start another,
// or hide what the line says from a reviewer:
//
//   - it is put on one visible line (spectext.Visible): no line break, and
//     control and bidi or format characters written as \uXXXX;
//   - "/*", "*/" and "//" get a space between their characters, so no line
//     of the comment opens or closes a comment whatever the wrapping does;
//   - "+build" gets a space, so a wrapped line never reads as a build
//     constraint.
//
// Go string literals need no such care: jennifer writes them with
// strconv.Quote, which escapes every character that is not printable.
func commentText(s string) string {
	v := spectext.Visible(s)
	var b strings.Builder
	b.Grow(len(v))
	var last rune
	for _, r := range v {
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
