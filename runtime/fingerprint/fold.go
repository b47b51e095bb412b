package fingerprint

import (
	"bytes"
	"math/bits"
	"slices"
	"unicode"
	"unicode/utf8"
)

// encoding/json gives a struct field the value of every object member whose
// name matches the field's name without regard to case, the last one
// winning. Case here is Unicode simple folding as bytes.EqualFold does it,
// so "k", "K" and the Kelvin sign U+212A are one letter, as are "s", "S" and
// the long s U+017F. A fingerprint reads member names exactly, so a body in
// which two members of one object fold together, or a member folds onto a
// fingerprinted name it does not equal, is read one way by the fingerprint
// and another by the handler; such bodies are refused.
//
// Names are compared in their canonical spelling. Only characters without
// case are escaped there, always one way (\", \\, \b, \f, \n, \r, \t or
// \u00 and two lower-case hex digits), so two canonical spellings fold
// together exactly when the names they spell do.

// caseVariants ends the message of an error that refuses such a body.
const caseVariants = "names that differ only in case, which encoding/json reads as one field"

// foldEntry is one member name of an object: its fold hash and where its
// canonical spelling sits in the buffer being checked. Offsets rather than
// slices keep scratch memory free of pointers into old buffers.
type foldEntry struct {
	hash       uint64
	start, end int
}

// plainName reports whether name has only ASCII characters and no upper
// case letter. Two different plain names never fold together, so an object
// whose names are all plain needs no further check: the common case of
// snake_case members costs one look at each byte.
func plainName(name []byte) bool {
	for _, c := range name {
		if c-'A' < 26 || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// foldHash returns a hash of name that is the same for all names that fold
// together: every character is replaced by the smallest one of its case
// folding orbit, which for ASCII letters is the upper case one. The hash
// only sorts names into candidates; bytes.EqualFold decides.
func foldHash(name []byte) uint64 {
	var h uint64
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			h = bits.RotateLeft64(h, 7) ^ uint64(c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		h = bits.RotateLeft64(h, 7) ^ uint64(foldRune(r))
		i += size
	}
	return h
}

// foldRune returns the smallest character that folds together with r.
func foldRune(r rune) rune {
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}

// smallObject is the member count up to which names are compared pairwise;
// larger objects sort their hashes instead.
const smallObject = 16

// foldClash reports whether two of the names es locates in buf fold
// together. It may reorder es.
func foldClash(buf []byte, es []foldEntry) bool {
	same := func(a, b foldEntry) bool {
		return a.hash == b.hash && bytes.EqualFold(buf[a.start:a.end], buf[b.start:b.end])
	}
	if len(es) <= smallObject {
		for i := 1; i < len(es); i++ {
			for j := range i {
				if same(es[i], es[j]) {
					return true
				}
			}
		}
		return false
	}
	slices.SortFunc(es, func(a, b foldEntry) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	for i := 1; i < len(es); i++ {
		// Names with one hash are next to each other; compare each with
		// every later one of its run, since a hash can collide.
		for j := i; j < len(es) && es[j].hash == es[i-1].hash; j++ {
			if same(es[i-1], es[j]) {
				return true
			}
		}
	}
	return false
}

// foldClashWithin reports whether any object inside the canonical value b
// has two members whose names fold together. It reads b once, whatever its
// nesting: a string followed by ':' is a member name of the innermost open
// object. es and opens are scratch memory, returned for reuse.
func foldClashWithin(b []byte, es []foldEntry, opens []int) (clash bool, _ []foldEntry, _ []int) {
	es, opens = es[:0], opens[:0]
	for i := 0; i < len(b); {
		switch b[i] {
		case '{':
			opens = append(opens, len(es))
			i++
		case '}':
			base := opens[len(opens)-1]
			opens = opens[:len(opens)-1]
			if foldClash(b, es[base:]) {
				return true, es, opens
			}
			es = es[:base]
			i++
		case '"':
			end := skipString(b, i)
			if end < len(b) && b[end] == ':' {
				es = append(es, foldEntry{foldHash(b[i+1 : end-1]), i + 1, end - 1})
			}
			i = end
		default:
			i++
		}
	}
	return false, es, opens
}

// foldsOntoChild returns the child of n whose name folds together with
// name, which is none of n's children, or nil.
func (n *node) foldsOntoChild(name []byte) *node {
	if n.plainChildren && plainName(name) {
		return nil
	}
	for _, c := range n.children {
		if bytes.EqualFold(name, c.key) {
			return c
		}
	}
	return nil
}
