package load

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v4"
)

// A spec written in JSON is read by a JSON decoder of its own, not by the
// YAML parser (JSON is YAML, but the YAML parser takes two to three times
// the time and memory over the same document in JSON's flow style). It
// builds the node tree the YAML parser builds from the same text: the same
// kinds, styles, tags, values, lines and columns (a column counts
// characters, not bytes, from 1), so that every diagnostic is where it
// would be. Strings take encoding/json's reading where YAML's would refuse
// the text: a surrogate pair escape ("\ud83d\udc4d" is 👍; Python's
// json.dump writes every emoji so) is its character, and a lone surrogate
// escape is U+FFFD. Line breaks are JSON's: a raw U+2028 inside a string
// is a character of it.

// maxJSONDepth is the YAML parser's limit on nesting; a deeper document is
// left to the YAML parser, which refuses it.
const maxJSONDepth = 10000

// jsonReader decodes one JSON document into nodes.
type jsonReader struct {
	src string // the document; unescaped strings and numbers are slices of it
	i   int    // the offset of the next byte to read
	// line is the current line (from 1), lineStart the offset at which it
	// starts, and wide how many bytes of it before i continue a character
	// begun earlier, so that the column of i is i-lineStart-wide+1.
	line, lineStart, wide int
	depth                 int
	nodes                 []yaml.Node  // allocated in blocks, handed out one by one
	refs                  []*yaml.Node // the same for the mappings' and sequences' Content
	pending               []*yaml.Node // the members read of the containers still open
	buf                   []byte       // a string with escapes, while it is decoded
}

// parseJSON returns the top-level object of data when data is one JSON
// object, or false when it is not JSON (or nests deeper than the YAML
// parser allows), which is for the YAML parser to read.
func parseJSON(data []byte) (*yaml.Node, bool) {
	r := &jsonReader{src: string(data), line: 1}
	if strings.HasPrefix(r.src, "\uFEFF") {
		r.i = len("\uFEFF") // the YAML parser, too, counts no column for it
		r.wide = r.i
	}
	r.space()
	if r.i >= len(r.src) || r.src[r.i] != '{' {
		return nil, false
	}
	root, ok := r.value()
	if !ok {
		return nil, false
	}
	r.space()
	return root, r.i == len(r.src)
}

// node returns a new node of kind at the current position.
func (r *jsonReader) node(kind yaml.Kind, style yaml.Style, tag string) *yaml.Node {
	if len(r.nodes) == 0 {
		r.nodes = make([]yaml.Node, 1024)
	}
	n := &r.nodes[0]
	r.nodes = r.nodes[1:]
	n.Kind, n.Style, n.Tag = kind, style, tag
	n.Line, n.Column = r.line, r.i-r.lineStart-r.wide+1
	return n
}

// space skips JSON's white space, counting lines as the YAML parser does:
// "\r\n", "\n" and a lone "\r" each end one.
func (r *jsonReader) space() {
	for ; r.i < len(r.src); r.i++ {
		switch r.src[r.i] {
		case ' ', '\t':
		case '\r':
			if r.i+1 < len(r.src) && r.src[r.i+1] == '\n' {
				r.i++
			}
			r.newLine()
		case '\n':
			r.newLine()
		default:
			return
		}
	}
}

func (r *jsonReader) newLine() {
	r.line, r.lineStart, r.wide = r.line+1, r.i+1, 0
}

// value reads the value at r.i.
func (r *jsonReader) value() (*yaml.Node, bool) {
	if r.i >= len(r.src) {
		return nil, false
	}
	switch c := r.src[r.i]; {
	case c == '{' || c == '[':
		return r.container()
	case c == '"':
		return r.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return r.number()
	}
	for _, lit := range [...]struct{ text, tag string }{{"true", tagBool}, {"false", tagBool}, {"null", tagNull}} {
		if strings.HasPrefix(r.src[r.i:], lit.text) {
			n := r.node(yaml.ScalarNode, 0, lit.tag)
			n.Value = lit.text
			r.i += len(lit.text)
			return n, true
		}
	}
	return nil, false
}

// container reads an object or an array.
func (r *jsonReader) container() (*yaml.Node, bool) {
	n := r.node(yaml.SequenceNode, yaml.FlowStyle, "!!seq")
	end := byte(']')
	if r.src[r.i] == '{' {
		n.Kind, n.Tag, end = yaml.MappingNode, "!!map", '}'
	}
	if r.depth++; r.depth > maxJSONDepth {
		return nil, false
	}
	r.i++
	r.space()
	mark := len(r.pending)
	if r.i < len(r.src) && r.src[r.i] == end {
		r.i++
		r.depth--
		return n, true
	}
	for {
		if n.Kind == yaml.MappingNode {
			if r.i >= len(r.src) || r.src[r.i] != '"' {
				return nil, false
			}
			k, _ := r.str()
			if k == nil {
				return nil, false
			}
			r.pending = append(r.pending, k)
			r.space()
			if r.i >= len(r.src) || r.src[r.i] != ':' {
				return nil, false
			}
			r.i++
			r.space()
		}
		v, ok := r.value()
		if !ok {
			return nil, false
		}
		r.pending = append(r.pending, v)
		r.space()
		if r.i >= len(r.src) {
			return nil, false
		}
		c := r.src[r.i]
		r.i++
		if c == end {
			break
		}
		if c != ',' {
			return nil, false
		}
		r.space()
	}
	n.Content = r.content(r.pending[mark:])
	clear(r.pending[mark:])
	r.pending = r.pending[:mark]
	r.depth--
	return n, true
}

// content copies members into a slice of their own length and capacity,
// so that appending to one node's Content never writes into another's.
func (r *jsonReader) content(members []*yaml.Node) []*yaml.Node {
	if len(members) > len(r.refs) {
		r.refs = make([]*yaml.Node, max(4096, len(members)))
	}
	c := r.refs[:len(members):len(members)]
	r.refs = r.refs[len(members):]
	copy(c, members)
	return c
}

// str reads a string.
func (r *jsonReader) str() (*yaml.Node, bool) {
	n := r.node(yaml.ScalarNode, yaml.DoubleQuotedStyle, tagStr)
	r.i++
	start := r.i
	for r.i < len(r.src) {
		switch c := r.src[r.i]; {
		case c == '"':
			n.Value = r.src[start:r.i]
			r.i++
			return n, true
		case c == '\\':
			return r.escaped(n, start)
		case c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			r.i++
		default:
			if !r.wideChar() {
				return nil, false
			}
		}
	}
	return nil, false
}

// wideChar steps over the character of more than one byte at r.i, which
// is one column; it is false for bytes that are not UTF-8, which the YAML
// parser refuses too.
func (r *jsonReader) wideChar() bool {
	c, size := utf8.DecodeRuneInString(r.src[r.i:])
	if c == utf8.RuneError && size == 1 {
		return false
	}
	r.i += size
	r.wide += size - 1
	return true
}

// escaped reads the rest of a string from its first escape on; the text
// from start to r.i has none.
func (r *jsonReader) escaped(n *yaml.Node, start int) (*yaml.Node, bool) {
	b := append(r.buf[:0], r.src[start:r.i]...)
	defer func() { r.buf = b[:0] }()
	for r.i < len(r.src) {
		c := r.src[r.i]
		switch {
		case c == '"':
			n.Value = string(b)
			r.i++
			return n, true
		case c == '\\':
			if r.i+1 >= len(r.src) {
				return nil, false
			}
			if e := r.src[r.i+1]; e == 'u' {
				ch, ok := r.unicodeEscape()
				if !ok {
					return nil, false
				}
				b = utf8.AppendRune(b, ch)
				continue
			} else if d := strings.IndexByte(`"\/bfnrt`, e); d >= 0 {
				b = append(b, "\"\\/\b\f\n\r\t"[d])
				r.i += 2
				continue
			}
			return nil, false
		case c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			b = append(b, c)
			r.i++
		default:
			from := r.i
			if !r.wideChar() {
				return nil, false
			}
			b = append(b, r.src[from:r.i]...)
		}
	}
	return nil, false
}

// unicodeEscape reads a \uXXXX escape, or a surrogate pair of them, at
// r.i. A lone surrogate is U+FFFD, as encoding/json reads it.
func (r *jsonReader) unicodeEscape() (rune, bool) {
	c, ok := r.hex4(r.i + 2)
	if !ok {
		return 0, false
	}
	r.i += 6
	if !utf16.IsSurrogate(c) {
		return c, true
	}
	if c < 0xdc00 && strings.HasPrefix(r.src[r.i:], `\u`) {
		if c2, ok := r.hex4(r.i + 2); ok && c2 >= 0xdc00 && c2 <= 0xdfff {
			r.i += 6
			return utf16.DecodeRune(c, c2), true
		}
	}
	return utf8.RuneError, true
}

// hex4 reads the four hex digits at src[i:].
func (r *jsonReader) hex4(i int) (rune, bool) {
	if i+4 > len(r.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(r.src[i:i+4], 16, 16)
	return rune(v), err == nil
}

// number reads a number, with the tag the YAML parser gives its text.
func (r *jsonReader) number() (*yaml.Node, bool) {
	n := r.node(yaml.ScalarNode, 0, tagInt)
	start := r.i
	r.i += boolInt(r.src[r.i] == '-')
	switch {
	case r.i < len(r.src) && r.src[r.i] == '0':
		r.i++
	case r.digits() == 0:
		return nil, false
	}
	integer := true
	if r.i < len(r.src) && r.src[r.i] == '.' {
		r.i++
		if r.digits() == 0 {
			return nil, false
		}
		integer = false
	}
	if r.i < len(r.src) && (r.src[r.i] == 'e' || r.src[r.i] == 'E') {
		r.i++
		if r.i < len(r.src) && (r.src[r.i] == '+' || r.src[r.i] == '-') {
			r.i++
		}
		if r.digits() == 0 {
			return nil, false
		}
		integer = false
	}
	n.Value = r.src[start:r.i]
	n.Tag = numberTag(n.Value, integer)
	return n, true
}

// numberTag is the YAML core schema's tag for a JSON number's text: an
// integer that 64 bits hold is !!int, "-0" is !!float (negative zero),
// and a number too large for a float64 is a string.
func numberTag(s string, integer bool) string {
	if integer && s != "-0" {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return tagInt
		}
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return tagInt
		}
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return tagStr
	}
	return tagFloat
}

// digits steps over decimal digits and says how many there were.
func (r *jsonReader) digits() int {
	start := r.i
	for r.i < len(r.src) && r.src[r.i] >= '0' && r.src[r.i] <= '9' {
		r.i++
	}
	return r.i - start
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
