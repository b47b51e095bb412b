package fingerprint

import (
	"bytes"
	"hash/maphash"
	"unicode"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/work"
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
//
// The check runs on request bodies before anything is claimed, so its cost
// must not be the client's to choose. Names are hashed with a seed the
// client never learns (hash/maphash): a client can make two names fold
// together, which ends the check at once, but it cannot make distinct names
// share a hash except by chance, so the names of an object are compared
// about once each, in time linear in their bytes.

// caseVariants ends the message of an error that refuses such a body.
const caseVariants = "names that differ only in case, which encoding/json reads as one field"

// foldEntry is one member name of an object: its fold hash and where its
// canonical spelling sits in the buffer being checked. Offsets rather than
// slices keep scratch memory free of pointers into old buffers.
type foldEntry struct {
	hash       uint64
	start, end int
}

// folds is the scratch memory and the hash seed of the case-fold check. Its
// zero value is ready to use; the seed is drawn on first use.
type folds struct {
	seed   maphash.Seed
	seeded bool
	names  []foldEntry // names of the objects being checked, innermost last
	opens  []int       // where each open object's names start in names
	folded []byte      // one name with every character folded
	table  []int32     // open-addressing index into names, -1 for empty
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

// hash returns a seeded hash of name that is the same for all names that
// fold together: every character is replaced by the smallest one of its
// case folding orbit, which for ASCII letters is the upper case one. The
// hash only sorts names into candidates; bytes.EqualFold decides.
func (f *folds) hash(name []byte) uint64 {
	if !f.seeded {
		f.seed, f.seeded = maphash.MakeSeed(), true
	}
	work.Add(len(name))
	b := f.folded[:0]
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b = append(b, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		b = utf8.AppendRune(b, foldRune(r))
		i += size
	}
	f.folded = b
	return maphash.Bytes(f.seed, b)
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
// larger objects index their hashes instead.
const smallObject = 16

// same reports whether the names a and b in buf fold together. It counts
// the comparison of their hashes and the bytes compared when those agree.
func (f *folds) same(buf []byte, a, b foldEntry) bool {
	work.Add(1)
	if a.hash != b.hash {
		return false
	}
	work.Add(min(a.end-a.start, b.end-b.start))
	return bytes.EqualFold(buf[a.start:a.end], buf[b.start:b.end])
}

// clash reports whether two of the names es locates in buf fold together.
func (f *folds) clash(buf []byte, es []foldEntry) bool {
	if len(es) <= smallObject {
		for i := 1; i < len(es); i++ {
			for j := range i {
				if f.same(buf, es[i], es[j]) {
					return true
				}
			}
		}
		return false
	}
	// An open-addressing table of twice the names' count, cleared only as
	// far as this object needs it, so that a large object does not make
	// every later small one pay for its size. With a seeded hash a probe
	// meets another name only by chance.
	size := 1
	for size < 2*len(es) {
		size <<= 1
	}
	if cap(f.table) < size {
		f.table = make([]int32, size)
	}
	t := f.table[:size]
	for i := range t {
		t[i] = -1
	}
	mask := uint64(size - 1)
	for i, e := range es {
		for h := e.hash & mask; ; h = (h + 1) & mask {
			work.Add(1)
			j := t[h]
			if j < 0 {
				t[h] = int32(i)
				break
			}
			if f.same(buf, es[j], e) {
				return true
			}
		}
	}
	return false
}

// clashWithin reports whether any object inside the canonical value b has
// two members whose names fold together. It reads b once, whatever its
// nesting: a string followed by ':' is a member name of the innermost open
// object.
func (f *folds) clashWithin(b []byte) bool {
	es, opens := f.names[:0], f.opens[:0]
	defer func() { f.names, f.opens = es, opens }()
	for i := 0; i < len(b); {
		switch b[i] {
		case '{':
			opens = append(opens, len(es))
			i++
		case '}':
			base := opens[len(opens)-1]
			opens = opens[:len(opens)-1]
			if f.clash(b, es[base:]) {
				return true
			}
			es = es[:base]
			i++
		case '"':
			end := skipString(b, i)
			if end < len(b) && b[end] == ':' {
				es = append(es, foldEntry{f.hash(b[i+1 : end-1]), i + 1, end - 1})
			}
			i = end
		default:
			i++
		}
	}
	return false
}

// foldsOntoChild returns the child of n whose name folds together with
// name, which is none of n's children, or nil. It counts the bytes
// compared.
func (n *node) foldsOntoChild(name []byte) *node {
	if n.plainChildren && plainName(name) {
		work.Add(len(name))
		return nil
	}
	for _, c := range n.children {
		work.Add(len(c.key))
		if bytes.EqualFold(name, c.key) {
			return c
		}
	}
	return nil
}
