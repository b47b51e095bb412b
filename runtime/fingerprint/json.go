package fingerprint

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/work"
)

// maxDepth bounds the nesting of arrays and objects. The scanner recurses
// once per level, so a hostile body of a million "[" must not turn into a
// million stack frames; encoding/json draws the same line.
const maxDepth = 10000

// scanner validates one JSON text and writes its canonical form to out in a
// single pass over the input. Objects are the only place that needs
// buffering: their members are written as they come, and an object whose
// closing brace shows them out of order is noted, to be rewritten in key
// order once the whole text is read.
type scanner struct {
	in    []byte
	pos   int
	out   []byte
	tmp   []byte // scratch for writing out reordered objects
	spans []span // members of the objects being scanned, innermost last
	// moved lists the objects whose members are out of order, and order
	// their members in key order; they are put in order once the whole
	// text is read (see reorder).
	moved []movedObject
	order []span
	depth int
	// folds refuses objects with two members whose names differ only in
	// case (see fold.go); set for a document fingerprinted whole.
	folds bool
	// caseful records, while folds is set, that a member name of the
	// innermost object being scanned is not plain.
	caseful bool
	fold    folds // the case-fold check's scratch memory
	// ctx, when set, stops the scan once it is done: its client has hung
	// up, and no one will read the fingerprint (see poll).
	ctx context.Context
	// checkAt is the input offset at which poll next looks at ctx.
	checkAt int
}

// checkEvery is how many bytes of input the scanner reads between two looks
// at its context: often enough that a request whose client hung up stops
// within a few microseconds, seldom enough to cost nothing measurable.
const checkEvery = 4 << 10

// movedObject is an object whose members are out of order: its braces sit
// at out[start] and out[end-1], and order[lo:hi] are its members in key
// order.
type movedObject struct{ start, end, lo, hi int }

// span locates one object member in out: the key's opening quote, the byte
// after its closing quote, and the byte after the value.
type span struct{ start, keyEnd, end int }

// canonicalize appends the canonical form of the JSON text in to out.
func (s *scanner) canonicalize(in []byte) error {
	s.in, s.pos, s.depth = in, 0, 0
	s.spans, s.moved, s.order = s.spans[:0], s.moved[:0], s.order[:0]
	s.checkAt = len(in) + 1 // never, without a context
	if s.ctx != nil {
		s.checkAt = 0
	}
	s.skipWS()
	if err := s.value(); err != nil {
		return err
	}
	s.skipWS()
	if s.pos != len(s.in) {
		return s.fail("unexpected data after the top-level value")
	}
	if err := s.poll(); err != nil {
		return err
	}
	s.reorder()
	return nil
}

// poll returns an error wrapping the context's once the scanner's context
// is done, and otherwise sets the offset of the next look. The scanner
// polls when a value starts and inside long strings, so that it reads at
// most about checkEvery bytes after the context ends (a run of whitespace
// or of a number's digits is read whole).
func (s *scanner) poll() error {
	if err := s.ended(); err != nil {
		return err
	}
	s.checkAt = s.pos + checkEvery
	return nil
}

// ended returns an error wrapping the context's once the scanner's context
// is done.
func (s *scanner) ended() error {
	if s.ctx == nil {
		return nil
	}
	if err := s.ctx.Err(); err != nil {
		return fmt.Errorf("fingerprint: stopped reading the body: %w", err)
	}
	return nil
}

func (s *scanner) fail(msg string) error {
	return fmt.Errorf("%w: JSON at byte %d: %s", ErrBody, s.pos, msg)
}

func (s *scanner) unexpected() error {
	if s.pos >= len(s.in) {
		return s.fail("unexpected end of input")
	}
	c := s.in[s.pos]
	if c >= 0x21 && c < 0x7f {
		return s.fail(fmt.Sprintf("unexpected character %q", c))
	}
	return s.fail(fmt.Sprintf("unexpected byte 0x%02x", c))
}

func (s *scanner) skipWS() {
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) value() error {
	if s.pos >= s.checkAt {
		if err := s.poll(); err != nil {
			return err
		}
	}
	if s.pos >= len(s.in) {
		return s.unexpected()
	}
	switch c := s.in[s.pos]; {
	case c == '{':
		return s.object()
	case c == '[':
		return s.array()
	case c == '"':
		return s.str()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		return s.unexpected()
	}
}

func (s *scanner) literal(word string) error {
	if len(s.in)-s.pos < len(word) || string(s.in[s.pos:s.pos+len(word)]) != word {
		return s.unexpected()
	}
	s.pos += len(word)
	s.out = append(s.out, word...)
	return nil
}

func (s *scanner) number() error {
	d, end, ok := scanNumber(s.in, s.pos)
	if !ok {
		s.pos = end
		return s.unexpected()
	}
	if d.expOverflow {
		return s.fail("number exponent out of range")
	}
	s.pos = end
	s.out = d.appendCanonical(s.out)
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return s.fail("nesting too deep")
	}
	return nil
}

func (s *scanner) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++
	s.out = append(s.out, '[')
	s.skipWS()
	if s.pos < len(s.in) && s.in[s.pos] == ']' {
		s.pos++
		s.out = append(s.out, ']')
		s.depth--
		return nil
	}
	for {
		s.skipWS()
		if err := s.value(); err != nil {
			return err
		}
		s.skipWS()
		if s.pos >= len(s.in) {
			return s.unexpected()
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
			s.out = append(s.out, ',')
		case ']':
			s.pos++
			s.out = append(s.out, ']')
			s.depth--
			return nil
		default:
			return s.unexpected()
		}
	}
}

func (s *scanner) object() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++
	s.out = append(s.out, '{')
	first := len(s.out)
	base := len(s.spans)
	outer := s.caseful
	s.caseful = false
	s.skipWS()
	if s.pos < len(s.in) && s.in[s.pos] == '}' {
		s.pos++
		s.out = append(s.out, '}')
		s.depth--
		s.caseful = outer
		return nil
	}
	for {
		s.skipWS()
		if s.pos >= len(s.in) || s.in[s.pos] != '"' {
			return s.unexpected()
		}
		if len(s.spans) > base {
			s.out = append(s.out, ',')
		}
		start := len(s.out)
		if err := s.strOrName(s.folds); err != nil {
			return err
		}
		keyEnd := len(s.out)
		s.skipWS()
		if s.pos >= len(s.in) || s.in[s.pos] != ':' {
			return s.unexpected()
		}
		s.pos++
		s.out = append(s.out, ':')
		s.skipWS()
		if err := s.value(); err != nil {
			return err
		}
		s.spans = append(s.spans, span{start, keyEnd, len(s.out)})
		s.skipWS()
		if s.pos >= len(s.in) {
			return s.unexpected()
		}
		if c := s.in[s.pos]; c == ',' {
			s.pos++
			continue
		} else if c != '}' {
			return s.unexpected()
		}
		s.pos++
		break
	}
	if len(s.spans)-base > smallObject {
		// Sorting a large object costs more than a look at the context.
		if err := s.ended(); err != nil {
			return err
		}
	}
	if err := s.sortMembers(first, s.spans[base:]); err != nil {
		return err
	}
	s.caseful = outer
	s.spans = s.spans[:base]
	s.out = append(s.out, '}')
	s.depth--
	return nil
}

func (s *scanner) key(m span) []byte { return s.out[m.start+1 : m.keyEnd-1] }

// sortMembers puts the members of the object whose first member starts at
// first into key order, noting the object for reorder when they were not,
// and rejects duplicate keys, and with s.folds keys
// that differ only in case. Keys are compared in their canonical spelling,
// which is one-to-one with their decoded value, so "\u0061" and "a" collide
// as they should. Bodies produced by programs are usually sorted already or
// small; only an out-of-order object pays for being rewritten.
func (s *scanner) sortMembers(first int, ms []span) error {
	sorted := true
	work.Add(len(ms))
	for i := 1; i < len(ms); i++ {
		switch bytes.Compare(s.key(ms[i-1]), s.key(ms[i])) {
		case 0:
			return s.duplicate()
		case 1:
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(ms, func(a, b span) int {
			work.Add(1)
			return bytes.Compare(s.key(a), s.key(b))
		})
		for i := 1; i < len(ms); i++ {
			if bytes.Equal(s.key(ms[i-1]), s.key(ms[i])) {
				return s.duplicate()
			}
		}
	}
	// Checked before the members move: the spans locate them where they
	// were written.
	if s.caseful && len(ms) > 1 {
		es := s.fold.names[:0]
		for _, m := range ms {
			es = append(es, foldEntry{s.fold.hash(s.key(m)), m.start + 1, m.keyEnd - 1})
		}
		s.fold.names = es
		if s.fold.clash(s.out, es) {
			return fmt.Errorf("%w: JSON object ending at byte %d has member %s", ErrBody, s.pos, caseVariants)
		}
	}
	if !sorted {
		lo := len(s.order)
		s.order = append(s.order, ms...)
		s.moved = append(s.moved, movedObject{first - 1, len(s.out) + 1, lo, len(s.order)})
	}
	return nil
}

func (s *scanner) duplicate() error {
	return fmt.Errorf("%w: JSON object ending at byte %d has a duplicate key", ErrBody, s.pos)
}

// str copies the string at s.pos to out in canonical spelling: decoded
// escapes, raw UTF-8, and only '"', '\\' and control characters escaped.
func (s *scanner) str() error { return s.strOrName(false) }

// strOrName is str, and for a member name of an object whose names are
// checked for case (name set) it also sets s.caseful when the name is not
// plain (see plainName), noticed in the same pass over its bytes; an escape
// counts as not plain, since it may spell any letter. The choice is made
// once per run of plain bytes, so that the loop copying string values
// tests nothing more than it must.
func (s *scanner) strOrName(name bool) error {
	s.pos++
	s.out = append(s.out, '"')
	for {
		if s.pos >= s.checkAt {
			if err := s.poll(); err != nil {
				return err
			}
		}
		// A run of plain bytes ends at the next poll, at the latest.
		i, end := s.pos, min(len(s.in), s.checkAt)
		if name {
			for i < end && !stopsString(s.in[i]) && s.in[i]-'A' >= 26 {
				i++
			}
		} else {
			for i < end && !stopsString(s.in[i]) {
				i++
			}
		}
		s.out = append(s.out, s.in[s.pos:i]...)
		s.pos = i
		if i < len(s.in) && s.in[i] == '"' {
			s.pos++
			s.out = append(s.out, '"')
			return nil
		}
		if i == end && i < len(s.in) {
			continue // to poll
		}
		s.caseful = s.caseful || name
		if err := s.strChar(); err != nil {
			return err
		}
	}
}

// stopsString reports whether c, inside a string, is not copied as it is.
func stopsString(c byte) bool {
	return c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf
}

// strChar copies the character at s.pos, inside a string, that is not
// copied as it is: an escape, a control character (refused), a non-ASCII
// character, or in a name an upper case letter.
func (s *scanner) strChar() error {
	if s.pos >= len(s.in) {
		return s.fail("unterminated string")
	}
	switch c := s.in[s.pos]; {
	case c == '\\':
		return s.escape()
	case c < 0x20:
		return s.fail(fmt.Sprintf("control character 0x%02x in string", c))
	case c < utf8.RuneSelf:
		s.out = append(s.out, c)
		s.pos++
	default:
		r, size := utf8.DecodeRune(s.in[s.pos:])
		if r == utf8.RuneError && size == 1 {
			return s.fail("invalid UTF-8 in string")
		}
		s.out = append(s.out, s.in[s.pos:s.pos+size]...)
		s.pos += size
	}
	return nil
}

func (s *scanner) escape() error {
	s.pos++ // the backslash
	if s.pos >= len(s.in) {
		return s.fail("unterminated string")
	}
	c := s.in[s.pos]
	s.pos++
	switch c {
	case '"', '\\':
		s.out = append(s.out, '\\', c)
	case '/':
		s.out = append(s.out, '/')
	case 'b', 'f', 'n', 'r', 't':
		s.out = append(s.out, '\\', c)
	case 'u':
		r, ok := s.hex4()
		if !ok {
			return s.fail("bad \\u escape")
		}
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return s.fail("lone low surrogate in \\u escape")
		case r >= 0xd800 && r <= 0xdbff:
			if len(s.in)-s.pos < 2 || s.in[s.pos] != '\\' || s.in[s.pos+1] != 'u' {
				return s.fail("lone high surrogate in \\u escape")
			}
			s.pos += 2
			lo, ok := s.hex4()
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return s.fail("high surrogate not followed by a low surrogate")
			}
			r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
		}
		s.out = appendRune(s.out, r)
	default:
		s.pos--
		return s.fail(fmt.Sprintf("bad escape \\%c", c))
	}
	return nil
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.in)-s.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.in[s.pos : s.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.pos += 4
	return r, true
}

const hexDigits = "0123456789abcdef"

// appendRune writes one decoded character in canonical string spelling.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(dst, '\\', byte(r))
	case r == '\b':
		return append(dst, '\\', 'b')
	case r == '\f':
		return append(dst, '\\', 'f')
	case r == '\n':
		return append(dst, '\\', 'n')
	case r == '\r':
		return append(dst, '\\', 'r')
	case r == '\t':
		return append(dst, '\\', 't')
	case r < 0x20:
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	default:
		return utf8.AppendRune(dst, r)
	}
}

// appendString writes s, which must be valid UTF-8, as a canonical JSON
// string.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendStringContent(dst, s)
	return append(dst, '"')
}

func appendStringContent(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			j := i + 1
			for j < len(s) && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		dst = appendRune(dst, rune(c))
		i++
	}
	return dst
}

// reorder rewrites the objects noted as out of order with their members in
// key order. Reordering an object as it closes would move its bytes once
// for every enclosing object that is out of order too, and a body nested
// ten thousand levels deep around one large value would be copied ten
// thousand times. Written out once at the end, every byte moves once.
// Reordering keeps each object's length, so every offset noted while
// scanning still holds.
func (s *scanner) reorder() {
	if len(s.moved) == 0 {
		return
	}
	// Objects close innermost first; writing out goes from the start.
	slices.SortFunc(s.moved, func(a, b movedObject) int { return a.start - b.start })
	start := s.moved[0].start
	s.tmp = append(s.tmp[:0], s.out[:start]...)
	s.tmp = s.writeOrdered(s.tmp, start, len(s.out))
	s.out, s.tmp = s.tmp, s.out
}

// writeOrdered appends out[lo:hi] to dst with every noted object inside it
// in key order.
func (s *scanner) writeOrdered(dst []byte, lo, hi int) []byte {
	i, _ := slices.BinarySearchFunc(s.moved, lo, byStart)
	for i < len(s.moved) && s.moved[i].start < hi {
		m := s.moved[i]
		work.Add(m.start - lo)
		dst = append(dst, s.out[lo:m.start]...)
		dst = append(dst, '{')
		for k, member := range s.order[m.lo:m.hi] {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = s.writeOrdered(dst, member.start, member.end)
		}
		dst = append(dst, '}')
		lo = m.end
		// Skip the objects inside this one: they were written with it.
		j, _ := slices.BinarySearchFunc(s.moved[i+1:], lo, byStart)
		i += 1 + j
	}
	work.Add(hi - lo)
	return append(dst, s.out[lo:hi]...)
}

func byStart(m movedObject, at int) int { return m.start - at }
