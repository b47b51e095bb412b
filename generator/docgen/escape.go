package docgen

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgen/idemgen/generator/internal/spectext"
)

// The generated page is Markdown, and a spec is untrusted input: a summary,
// a path or an operationId must show as the text it is, and must not add
// HTML, links, emphasis or table cells to the page. Every string from the
// spec reaches the page through text or code below; the page's own words
// do not.

// markdownSpecial are the characters that can start Markdown or HTML
// syntax inside a line: code spans, emphasis, links and images, raw HTML
// and entities, table cells, headings' closing marks, strikethrough and
// the math spans some renderers (GitHub's among them) draw. Each is
// written with a backslash, which CommonMark defines for every ASCII
// punctuation character and GitHub's tables honour for "|".
const markdownSpecial = "\\`*_[]<>|#~&$!"

// text writes s as plain Markdown text on one line. An underscore between
// two letters or digits (pet_id) cannot start or end emphasis, so it is
// left as it is, for the page's source to stay readable.
func text(s string) string {
	rs := []rune(visible(s))
	var b strings.Builder
	for i, r := range rs {
		special := r < utf8.RuneSelf && strings.ContainsRune(markdownSpecial, r)
		if r == '_' && i > 0 && i+1 < len(rs) && isAlnum(rs[i-1]) && isAlnum(rs[i+1]) {
			special = false
		}
		if special {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isAlnum(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// code writes s as a code span when it can stand in one unchanged, and as
// text otherwise. A code span shows its content literally, but it cannot
// hold a backtick without a longer fence, and a "|" in it still splits a
// table cell, so such strings are written as escaped text instead.
func code(s string) string {
	v := visible(s)
	if v == "" || strings.ContainsAny(v, "`|") {
		return text(s)
	}
	return "`" + v + "`"
}

// visible puts s on one line as a reader should see it.
func visible(s string) string { return spectext.Visible(s) }

// commentText makes s safe inside an HTML comment: on one line, and with
// no "--", which could close the comment.
func commentText(s string) string {
	v := visible(s)
	for strings.Contains(v, "--") {
		v = strings.ReplaceAll(v, "--", "- -")
	}
	return v
}
