package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Everything the keys commands print from a row was written, in the end,
// by a client: its key, its tenant, the headers and body its request drew.
// None of it may reach the operator's terminal as anything but text: no
// escape sequence (which can retitle the window, write the clipboard or
// move the cursor), no carriage return or bidi override (which hide or
// reorder what is shown), no line break that forges a line of output.

// shown is s as a terminal may print it: s itself when every rune is
// printable and s does not start with a double quote, else s quoted in Go
// syntax, so that a quoted value cannot pass for a plain one either.
func shown(s string) string {
	if strings.HasPrefix(s, `"`) || !printable(s) {
		return strconv.Quote(s)
	}
	return s
}

// cell is shown for a cell of a table, where a space would make one value
// look like two columns and an empty one would shift the row.
func cell(s string) string {
	if s == "" || strings.ContainsRune(s, ' ') {
		return strconv.Quote(s)
	}
	return shown(s)
}

func printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return false
			}
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// escaped is a message with every unprintable rune written as its Go
// escape; the message stays one line of text.
func escaped(msg string) string {
	if printable(msg) {
		return msg
	}
	q := strconv.Quote(msg)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}

// unsafeRune reports a rune that a terminal acts on or that changes how
// the text around it reads: C0 and C1 controls, DEL, and the bidi
// controls that reorder a line.
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// writeJSON prints v indented, with every unsafe rune the encoder leaves
// as it is (DEL, C1 and bidi controls) written as a \u escape: the same
// JSON value, which a terminal shows as text. Outside strings the encoder
// writes only ASCII, so every such rune is inside a string.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return failure{err.Error()}
	}
	out := make([]byte, 0, buf.Len())
	for _, r := range buf.String() {
		if r != '\n' && unsafeRune(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
			continue
		}
		out = utf8.AppendRune(out, r)
	}
	if _, err := w.Write(out); err != nil {
		return failure{err.Error()}
	}
	return nil
}
