package load

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v4"
)

// JSON escapes a character outside the Basic Multilingual Plane as a
// UTF-16 surrogate pair ("\ud83d\udc4d" is 👍; Python's json.dump writes
// every emoji so), and YAML's double-quoted strings, which JSON's strings
// otherwise are, refuse surrogates. The loader parses JSON as YAML to get
// one node tree with positions for both, so before parsing it rewrites
// such escapes in a document that is valid JSON into forms YAML accepts:
// a pair becomes YAML's \UXXXXXXXX escape of the same character, and a
// lone surrogate becomes \uFFFD, as encoding/json reads it. The rewrite is
// two characters shorter per pair; columnShifts puts the columns of what
// follows on the same line back where the file has them.

// columnShift says that from column at on, the parsed text is delta
// columns to the left of the file's.
type columnShift struct{ at, delta int }

// rewriteSurrogates returns data with its surrogate escapes rewritten, and
// for each line that changed (1-based) the shifts of its columns. It
// returns data itself, and no shifts, when data has no surrogate escape or
// is not JSON: a YAML document's "\ud83d" may be text (in a plain or
// single-quoted scalar), and rewriting it there would change the value.
func rewriteSurrogates(data []byte) ([]byte, map[int][]columnShift) {
	if !hasSurrogateEscape(data) || !json.Valid(data) {
		return data, nil
	}
	out := make([]byte, 0, len(data))
	shifts := map[int][]columnShift{}
	line, col := 1, 1 // of the next character written to out
	inString := false
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '\n':
			line, col = line+1, 1
			out = append(out, c)
			i++
			continue
		case c == '"':
			inString = !inString
		case inString && c == '\\' && i+1 < len(data) && data[i+1] == 'u':
			r1, ok1 := hex4(data, i+2)
			switch {
			case !ok1 || !utf16.IsSurrogate(rune(r1)):
			case r1 < 0xdc00 && i+11 < len(data) && data[i+6] == '\\' && data[i+7] == 'u':
				if r2, ok := hex4(data, i+8); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
					esc := fmt.Sprintf(`\U%08X`, utf16.DecodeRune(rune(r1), rune(r2)))
					out = append(out, esc...)
					col += len(esc)
					shifts[line] = append(shifts[line], columnShift{at: col, delta: 12 - len(esc)})
					i += 12
					continue
				}
				fallthrough
			default:
				out = append(out, `\uFFFD`...)
				col += 6
				i += 6
				continue
			}
			// An escape of another character: copy it whole.
			out = append(out, data[i:i+6]...)
			col += 6
			i += 6
			continue
		case inString && c == '\\':
			out = append(out, data[i:i+2]...)
			col += 2
			i += 2
			continue
		}
		_, size := utf8.DecodeRune(data[i:])
		out = append(out, data[i:i+size]...)
		col++
		i += size
	}
	return out, shifts
}

// hasSurrogateEscape reports whether data holds a \uD800–\uDFFF escape.
func hasSurrogateEscape(data []byte) bool {
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(`\u`))
		if j < 0 {
			return false
		}
		i += j + 2
		if i < len(data) && (data[i] == 'd' || data[i] == 'D') && i+1 < len(data) && bytes.IndexByte([]byte("89abAB"), data[i+1]) >= 0 {
			return true
		}
	}
}

// hex4 reads the four hex digits at data[i:].
func hex4(data []byte, i int) (uint16, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	return uint16(n), err == nil
}

// unshiftColumns moves the columns of the nodes on shifted lines back to
// where they are in the file.
func unshiftColumns(n *yaml.Node, shifts map[int][]columnShift) {
	if n == nil {
		return
	}
	for _, s := range shifts[n.Line] {
		if n.Column >= s.at {
			n.Column += s.delta
		}
	}
	if n.Kind == yaml.AliasNode {
		return
	}
	for _, c := range n.Content {
		unshiftColumns(c, shifts)
	}
}
