package fingerprint

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemgen/idemgen/internal/work"
)

// parsePointer splits an RFC 6901 JSON Pointer into its reference tokens,
// each in canonical JSON string spelling (without quotes) so that it can be
// compared byte for byte with the keys of a canonical document.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%w: JSON Pointer %q does not start with /", ErrSpec, p)
	}
	if !utf8.ValidString(p) {
		return nil, fmt.Errorf("%w: JSON Pointer %q is not valid UTF-8", ErrSpec, p)
	}
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		if strings.Contains(t, "~") {
			var b strings.Builder
			for j := 0; j < len(t); j++ {
				if t[j] != '~' {
					b.WriteByte(t[j])
					continue
				}
				if j+1 < len(t) && t[j+1] == '0' {
					b.WriteByte('~')
				} else if j+1 < len(t) && t[j+1] == '1' {
					b.WriteByte('/')
				} else {
					return nil, fmt.Errorf("%w: JSON Pointer %q has a ~ not followed by 0 or 1", ErrSpec, p)
				}
				j++
			}
			t = b.String()
		}
		parts[i] = string(appendStringContent(nil, t))
	}
	return parts, nil
}

// node is one step of the compiled pointer tree. Pointers that share a
// prefix share nodes, so one walk over a document finds every field.
type node struct {
	name     string  // reference token, canonical spelling
	key      []byte  // name, for comparing without regard to case
	field    int     // index of the field ending here, or -1
	children []*node // sorted by name
	// plainChildren says every child's name is plain (see plainName).
	plainChildren bool
	// below lists the fields strictly under this node: they all take the
	// node's value whole when it turns out to be an array.
	below []int
}

// child returns the child of n named name, or nil. It counts the
// children compared.
func (n *node) child(name []byte) *node {
	for _, c := range n.children {
		work.Add(1)
		if string(name) == c.name {
			return c
		}
	}
	return nil
}

func (n *node) add(tokens []string, field int) {
	cur := n
	for _, t := range tokens {
		cur.below = append(cur.below, field)
		next := cur.child([]byte(t))
		if next == nil {
			if len(cur.children) == 0 {
				cur.plainChildren = true
			}
			next = &node{name: t, key: []byte(t), field: -1}
			cur.children = append(cur.children, next)
			cur.plainChildren = cur.plainChildren && plainName(next.key)
		}
		cur = next
	}
	cur.field = field
}

// pick returns the child of n that a member named name leads to, or nil.
// The error refuses a member whose name folds onto a child's without being
// it, which encoding/json would read as that child (see fold.go): it is
// the rule for every pointer the engine follows into a JSON body, a
// fingerprinted field's as a body-carried key's. It counts the names
// compared.
func (n *node) pick(name []byte) (*node, error) {
	if c := n.child(name); c != nil {
		return c, nil
	}
	if f := n.foldsOntoChild(name); f != nil {
		return nil, fmt.Errorf("%w: a member's name and %q differ only in case, which encoding/json reads as one field", ErrBody, f.name)
	}
	return nil, nil
}

// branch compiles one pointer into a tree of a single branch, whose end is
// field 0.
func branch(pointer string) (*node, error) {
	tokens, err := parsePointer(pointer)
	if err != nil {
		return nil, err
	}
	root := &node{field: -1}
	root.add(tokens, 0)
	return root, nil
}

// find returns the value at the end of the single-branch tree n (see branch)
// in the canonical document b, walking through objects only. With folds
// set, as for a JSON body, it reads every member of each object on the way
// and refuses the body as extract does (see pick); without, as for a form,
// whose readers match names exactly, it compares names exactly. It
// counts the bytes skipped and the names compared.
func (st *state) find(b []byte, n *node, folds bool) (v []byte, found bool, err error) {
	start, end := 0, len(b)
	for len(n.children) > 0 {
		if b[start] != '{' {
			return nil, false, nil
		}
		var next *node
		for i := start + 1; b[i] != '}'; {
			keyEnd := skipString(b, i)
			valEnd := skipValue(b, keyEnd+1)
			name := b[i+1 : keyEnd-1]
			var c *node
			if folds {
				c, err = n.pick(name)
			} else {
				c = n.child(name)
			}
			if err != nil {
				return nil, false, err
			}
			if c != nil {
				next, start, end = c, keyEnd+1, valEnd
				if !folds {
					break
				}
			}
			i = valEnd
			if b[i] == ',' {
				i++
			}
		}
		if next == nil {
			return nil, false, nil
		}
		n = next
	}
	return b[start:end], true, nil
}

// slot is where a selected field's canonical value sits in a buffer.
type slot struct {
	start, end int
	found      bool
}

// extract walks the canonical value b[start:end] along the pointer tree n
// and records where each field's value is. A field missing from the
// document keeps found=false. It refuses a body that encoding/json would
// read otherwise (see fold.go): on the way down, a member whose name folds
// onto a fingerprinted name without being it; inside a fingerprinted
// object or array, two member names that fold together. It counts the
// bytes skipped and the names compared on the way, so that tests can hold
// the walk to the body's size.
func (st *state) extract(b []byte, start, end int, n *node, slots []slot) error {
	if n.field >= 0 {
		slots[n.field] = slot{start, end, true}
		if err := st.checkFolds(b[start:end]); err != nil {
			return err
		}
	}
	if len(n.children) == 0 {
		return nil
	}
	switch b[start] {
	case '{':
		for i := start + 1; b[i] != '}'; {
			keyEnd := skipString(b, i)
			valEnd := skipValue(b, keyEnd+1)
			name := b[i+1 : keyEnd-1]
			c, err := n.pick(name)
			if err != nil {
				return err
			}
			if c != nil {
				if err := st.extract(b, keyEnd+1, valEnd, c, slots); err != nil {
					return err
				}
			}
			i = valEnd
			if b[i] == ',' {
				i++
			}
		}
	case '[':
		// The generator emits pointers to object members only and
		// fingerprints an array as one value: a pointer that runs into an
		// array takes the whole array.
		for _, f := range n.below {
			slots[f] = slot{start, end, true}
		}
		return st.checkFolds(b[start:end])
	}
	return nil
}

// checkFolds refuses a fingerprinted value with an object inside whose
// member names fold together. A scalar has no members to check.
func (st *state) checkFolds(v []byte) error {
	if v[0] != '{' && v[0] != '[' {
		return nil
	}
	if st.fold.clashWithin(v) {
		return fmt.Errorf("%w: fingerprinted body value has an object with member %s", ErrBody, caseVariants)
	}
	return nil
}

// member finds the object member that tokens point to in the canonical
// document b, walking through objects only. keyStart is the member's first
// byte; the value is b[valStart:valEnd]. With no tokens it finds the whole
// document and keyStart is -1. It counts the bytes skipped and the
// names compared.
func (st *state) member(b []byte, tokens []string) (keyStart, valStart, valEnd int, ok bool) {
	keyStart, valStart, valEnd = -1, 0, len(b)
	for _, t := range tokens {
		if b[valStart] != '{' {
			return 0, 0, 0, false
		}
		found := false
		for i := valStart + 1; b[i] != '}'; {
			keyEnd := skipString(b, i)
			end := skipValue(b, keyEnd+1)
			work.Add(1)
			if string(b[i+1:keyEnd-1]) == t {
				keyStart, valStart, valEnd, found = i, keyEnd+1, end, true
				break
			}
			i = end
			if b[i] == ',' {
				i++
			}
		}
		if !found {
			return 0, 0, 0, false
		}
	}
	return keyStart, valStart, valEnd, true
}

// removeMember deletes the object member that tokens point to from the
// canonical document b, if it is there, with the comma that separated it.
func (st *state) removeMember(b []byte, tokens []string) []byte {
	i, _, end, ok := st.member(b, tokens)
	switch {
	case !ok || i < 0:
		return b
	case b[i-1] == ',':
		return append(b[:i-1], b[end:]...)
	case b[end] == ',':
		return append(b[:i], b[end+1:]...)
	default:
		return append(b[:i], b[end:]...)
	}
}

// skipString returns the end of the canonical string starting at b[i]. A
// quote ends the string unless an odd run of backslashes escapes it. It
// counts the bytes read, the backslashes before a quote twice.
func skipString(b []byte, i int) int {
	for i++; ; {
		q := i + bytes.IndexByte(b[i:], '"')
		n := 0
		for q-n-1 >= i && b[q-n-1] == '\\' {
			n++
		}
		work.Add(q + 1 - i + n)
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// skipValue returns the end of the canonical value starting at b[i]. It
// counts the bytes read (see skipString for those inside strings).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth, start := 0, i
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					work.Add(i + 1 - start)
					return i + 1
				}
			}
		}
	default:
		j := bytes.IndexAny(b[i:], ",}]")
		if j < 0 {
			j = len(b) - i
		}
		work.Add(j)
		return i + j
	}
}
