package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The worst bodies known for each algorithm that reads a body before its
// claim. The work tests (work_test.go and pointer_work_test.go, built with
// the idemwork tag) count what they cost; the tests here check what a
// count cannot: that objects put in order come out as encoding/json sorts
// them, and that the pointer shapes reach the fields they aim at.

// hostileBody is a shape of body built to a given size.
type hostileBody struct {
	name  string
	build func(size int) []byte
}

// members writes an object of members named by name(i) until it holds
// size bytes, with values of value.
func members(size int, name func(i int) string, value string) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; b.Len() < size-2; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", name(i), value)
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// linearCollision returns a name from a family whose members all had one
// hash under a hash that is linear over GF(2) (rotate by 7 and XOR, 64
// bits): characters 64 apart land on the same bits, so any pair of them
// with a fixed XOR may be swapped for another. The names are distinct,
// and none folds onto another.
func linearCollision(i int) string {
	b := []byte("X" + strings.Repeat("0", 128))
	pairs := [4][2]byte{{'0', '1'}, {'1', '0'}, {'2', '3'}, {'3', '2'}}
	for p := 0; p < 64; p++ {
		pair := pairs[(i>>(2*p))&3]
		b[1+p], b[1+p+64] = pair[0], pair[1]
	}
	return string(b)
}

var hostileJSON = []hostileBody{
	{"names with one linear hash", func(size int) []byte {
		return members(size, linearCollision, "0")
	}},
	{"random names of the same shape", func(size int) []byte {
		r := rand.New(rand.NewPCG(1, uint64(size)))
		return members(size, func(int) string {
			b := []byte("X" + strings.Repeat("0", 128))
			for j := 1; j < len(b); j++ {
				b[j] = byte('0' + r.IntN(4))
			}
			return string(b)
		}, "0")
	}},
	{"names shuffled, with a long common prefix", func(size int) []byte {
		// Shuffled, since sorting is cheapest on a run already in
		// order or in reverse.
		prefix := strings.Repeat("p", 64)
		r := rand.New(rand.NewPCG(2, uint64(size)))
		perm := r.Perm(size / 64)
		return members(size, func(i int) string { return fmt.Sprintf("%s%09d", prefix, perm[i]) }, "0")
	}},
	{"case variants of one letter, far apart", func(size int) []byte {
		// Distinct names up to the last one, which folds onto the first.
		n := size / 24
		return members(size, func(i int) string {
			if i == n-1 {
				return "A"
			}
			return fmt.Sprintf("N%08d", i)
		}, "0")
	}},
	{"objects nested out of order around one large value", func(size int) []byte {
		depth := min(maxDepth-1, size/64)
		open := strings.Repeat(`{"b":`, depth)
		close := strings.Repeat(`,"a":0}`, depth)
		pad := size - len(open) - len(close) - 2
		return []byte(open + `"` + strings.Repeat("x", max(pad, 0)) + `"` + close)
	}},
	{"many small objects, each out of order", func(size int) []byte {
		var b strings.Builder
		b.WriteByte('[')
		for i := 0; b.Len() < size-40; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"Zz":1,"Yy":2,"Xx":{"b":1,"a":2},"Ww":3}`)
		}
		b.WriteByte(']')
		return []byte(b.String())
	}},
}

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

// Objects out of order are written in key order once, at the end; the
// result must still be what sorting every object as it closes gives, at
// every depth and beside objects that were in order.
func TestReorderedObjectsMatchEncodingJSON(t *testing.T) {
	bodies := []string{
		string(hostileJSON[4].build(4 << 10)),
		string(hostileJSON[5].build(1 << 10)),
		`{"z":{"b":[{"d":1,"c":{"y":2,"x":3}},{"a":1}],"a":{"n":1,"m":2}},"a":{"c":1,"b":{"f":1,"e":[{"h":1,"g":2}]}},"m":[1,{"b":2,"a":1}]}`,
		`[{"b":1,"a":2},{"a":1,"b":2},{"b":{"b":1,"a":2},"a":{"a":1,"b":2}}]`,
	}
	for _, body := range bodies {
		got, err := CanonicalJSON(nil, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(v) // sorts every object's keys
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("canonical form of %.80s…:\n got %.200s\nwant %.200s", body, got, want)
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

// BenchmarkHostileBodies times a whole-body fingerprint of each hostile
// shape at 1 MiB, so that the CPU of crafted names can be set beside that
// of random names of the same shape in one run.
func BenchmarkHostileBodies(b *testing.B) {
	c := mustCompile(b, Spec{})
	for _, shape := range hostileJSON {
		body := shape.build(1 << 20)
		b.Run(shape.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, _ = c.Sum(Input{MediaType: jsonType, Body: body})
			}
		})
	}
}
