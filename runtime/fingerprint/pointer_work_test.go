package fingerprint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// Pointers are the spec's, bodies the client's. A walk along a pointer
// skips every member it passes and reads the one it follows again one
// level down, so its work is at most the body's size times the pointer's
// depth plus one, and the depth is the spec's: for a fixed spec the work per
// body byte must stay flat, whatever members, nesting, escapes or arrays
// the client puts in its way. These tests count it (bytes skipped, names
// compared) from 1 KiB to the 1 MiB body limit.

// pointerDepth is the depth of the deepest pointer the tests follow.
const pointerDepth = 32

// deepPointer is "/a/a/…/a", pointerDepth tokens long.
var deepPointer = strings.Repeat("/a", pointerDepth)

// pointerFields are the fields of the spec the walks follow: many
// siblings, one deep pointer, escaped tokens ("x/y~z") and a pointer that
// runs into an array.
func pointerFields() []Field {
	fields := []Field{{Pointer: deepPointer}, {Pointer: "/x~1y~0z/k~0~1"}, {Pointer: "/list/x"}}
	for i := range 32 {
		fields = append(fields, Field{Pointer: fmt.Sprintf("/f%02d", i)})
	}
	return fields
}

// nested writes depth objects, each holding a member "a" with the next
// one inside and a member "b" with sibling(level), around inner.
func nested(depth int, inner string, sibling func(level int) string) string {
	var b strings.Builder
	for i := range depth {
		fmt.Fprintf(&b, `{"b":%s,"a":`, sibling(i))
	}
	b.WriteString(inner)
	b.WriteString(strings.Repeat("}", depth))
	return b.String()
}

// longString is a JSON string of n bytes, quotes included.
func longString(n int) string { return `"` + strings.Repeat("x", max(n-2, 0)) + `"` }

var hostilePointerBodies = []hostileBody{
	{"many members beside the fields", func(size int) []byte {
		return members(size, func(i int) string { return fmt.Sprintf("m%07d", i) }, "0")
	}},
	{"names that differ from the fields only past their first bytes", func(size int) []byte {
		// Not plain, so each is compared with every field's name
		// without regard to case; none folds onto one.
		return members(size, func(i int) string { return fmt.Sprintf("F%02d_%07d", i%32, i) }, "0")
	}},
	{"nested along the deep pointer around one large value", func(size int) []byte {
		return []byte(nested(pointerDepth, longString(size-12*pointerDepth), func(int) string { return "0" }))
	}},
	{"nested along the deep pointer with a large sibling at every level", func(size int) []byte {
		each := max(size/pointerDepth-12, 2)
		return []byte(nested(pointerDepth, "0", func(int) string { return longString(each) }))
	}},
	{"names of escaped quotes and backslashes beside escaped tokens", func(size int) []byte {
		return members(size, func(i int) string {
			if i == 0 {
				return "x/y~z"
			}
			return fmt.Sprintf(`%s"x/y~z%d`, strings.Repeat(`\`, 64), i)
		}, `{"k~/":0}`)
	}},
	{"a large array where a pointer passes", func(size int) []byte {
		var b strings.Builder
		b.WriteString(`{"list":[`)
		for i := 0; b.Len() < size-32; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"Xx":1,"Yy":2,"x":{"Zz":3}}`)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}},
}

// walkWork returns the work of fingerprinting body under c, as a request
// whose key is read at keyPointer ("" for none) would: the canonical scan
// and the walks along the pointers.
func walkWork(t *testing.T, c *Compiled, body []byte, keyPointer string) int {
	t.Helper()
	st := c.pool.Get().(*state)
	defer c.pool.Put(st)
	st.work, st.sc.work, st.sc.fold.work, st.fold.work = 0, 0, 0, 0
	doc, err := c.document(st, jsonType, body)
	if err != nil {
		t.Fatalf("%d bytes: %v", len(body), err)
	}
	if keyPointer != "" {
		key, err := c.keyPath(keyPointer)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.lookup(doc, key, jsonType); err != nil {
			t.Fatalf("%d bytes: %v", len(body), err)
		}
	}
	if _, err := c.appendDocument(st, nil, doc, Input{MediaType: jsonType, Body: body}); err != nil {
		t.Fatalf("%d bytes: %v", len(body), err)
	}
	return len(body) + st.work + st.sc.work + st.sc.fold.work + st.fold.work
}

func TestPointerWalkWorkIsLinear(t *testing.T) {
	for _, spec := range []struct {
		name       string
		spec       Spec
		keyPointer string
	}{
		{"fields, with a key of escaped tokens", Spec{Body: pointerFields()}, "/x~1y~0z/k~0~1"},
		{"whole body, excluding a deep member", Spec{Exclude: deepPointer}, ""},
		{"whole body, with a deep key", Spec{}, deepPointer},
	} {
		c := mustCompile(t, spec.spec)
		for _, shape := range hostilePointerBodies {
			t.Run(spec.name+"/"+shape.name, func(t *testing.T) {
				worktest.FlatPerByte(t, 2, func(size int) (int, int) {
					body := shape.build(size)
					return walkWork(t, c, body, spec.keyPointer), len(body)
				})
			})
		}
	}
}

// The shapes reach what they were built to reach: the deep pointer's
// value, the escaped tokens' member and the array.
func TestHostilePointerBodiesReachTheFields(t *testing.T) {
	c := mustCompile(t, Spec{Body: pointerFields()})
	for _, tc := range []struct {
		shape int
		field string
		want  string
	}{
		{2, deepPointer, `"xxxx`},
		{3, deepPointer, `0`},
		{4, "/x~1y~0z/k~0~1", `0`},
		{5, "/list/x", `[{"Xx":1`},
	} {
		body := hostilePointerBodies[tc.shape].build(4 << 10)
		canon, err := c.Canonical(nil, Input{MediaType: jsonType, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("field %d:%s ", len(tc.field), tc.field)
		i := strings.Index(string(canon), line)
		if i < 0 {
			t.Fatalf("%s: no line for %s in %.200s", hostilePointerBodies[tc.shape].name, tc.field, canon)
		}
		value := string(canon[i+len(line):])
		if _, v, ok := strings.Cut(value, ":"); ok {
			value = v
		}
		if !strings.HasPrefix(value, tc.want) {
			t.Errorf("%s: %s is %.60s, want it to start %s", hostilePointerBodies[tc.shape].name, tc.field, value, tc.want)
		}
	}
}
