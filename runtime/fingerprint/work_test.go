package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// A request body is the client's to choose, and it is read before anything
// is claimed: the work of reading it must grow with its size and with
// nothing else the client controls. These tests count that work (key
// comparisons, bytes hashed, compared and moved) on the worst bodies we
// know how to build, and hold the work per input byte flat from 1 KiB to
// the engine's default body limit of 1 MiB.

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

// canonicalWork returns the work of canonicalizing body with the case-fold
// check on, as for a body fingerprinted whole, and the error.
func canonicalWork(body []byte) (int, error) {
	var s scanner
	s.folds = true
	err := s.canonicalize(body)
	return len(body) + s.work + s.fold.work, err
}

func TestCanonicalWorkIsLinear(t *testing.T) {
	for _, shape := range hostileJSON {
		t.Run(shape.name, func(t *testing.T) {
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				body := shape.build(size)
				n, err := canonicalWork(body)
				if err != nil && !strings.Contains(err.Error(), caseVariants) {
					t.Fatalf("%d bytes: %v", len(body), err)
				}
				return n, len(body)
			})
		})
	}
}

// A field fingerprinted by pointer is checked for case variants on its own
// (checkFolds), after the body is canonical: the same bodies, held as the
// value of one fingerprinted member.
func TestFieldFoldWorkIsLinear(t *testing.T) {
	c := mustCompile(t, Spec{Body: []Field{{Pointer: "/v"}}})
	for _, shape := range hostileJSON {
		t.Run(shape.name, func(t *testing.T) {
			worktest.FlatPerByte(t, 2, func(size int) (int, int) {
				body := append(append([]byte(`{"v":`), shape.build(size)...), '}')
				st := c.pool.Get().(*state)
				defer c.pool.Put(st)
				_, err := c.appendCanonical(st, nil, Input{MediaType: jsonType, Body: body})
				if err != nil && !strings.Contains(err.Error(), caseVariants) {
					t.Fatalf("%d bytes: %v", len(body), err)
				}
				n := len(body) + st.sc.work + st.sc.fold.work + st.fold.work
				st.sc.work, st.sc.fold.work, st.fold.work = 0, 0, 0
				return n, len(body)
			})
		})
	}
}

// Names a client crafts to share a hash cost no more than random names of
// the same shape: the hash has a seed the client cannot know.
func TestCraftedNamesCostAsRandomOnes(t *testing.T) {
	crafted, random := hostileJSON[0], hostileJSON[1]
	cw, err := canonicalWork(crafted.build(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := canonicalWork(random.build(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crafted: %d steps, random: %d steps", cw, rw)
	if float64(cw) > 1.5*float64(rw) {
		t.Errorf("1 MiB of crafted names cost %d steps, %.1f× the %d of random names", cw, float64(cw)/float64(rw), rw)
	}
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

// pairs writes a form of pairs from pair(i) until it holds size bytes.
func pairs(size int, pair func(i int) string) []byte {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(pair(i))
	}
	return []byte(b.String())
}

var hostileForms = []hostileBody{
	{"names shuffled, with a long common prefix", func(size int) []byte {
		prefix := strings.Repeat("p", 64)
		perm := rand.New(rand.NewPCG(3, uint64(size))).Perm(size / 64)
		return pairs(size, func(i int) string { return fmt.Sprintf("a[%s%09d]=x", prefix, perm[i%len(perm)]) })
	}},
	{"indices shuffled", func(size int) []byte {
		perm := rand.New(rand.NewPCG(4, uint64(size))).Perm(size / 8)
		return pairs(size, func(i int) string { return fmt.Sprintf("a[%d]=x", perm[i%len(perm)]) })
	}},
	{"one name deeply nested, many leaves", func(size int) []byte {
		stem := "a" + strings.Repeat("[b]", 200)
		return pairs(size, func(i int) string { return fmt.Sprintf("%s[c%d]=x", stem, i) })
	}},
	{"one name, many values", func(size int) []byte {
		return pairs(size, func(int) string { return "a[]=x" })
	}},
	{"escapes everywhere", func(size int) []byte {
		return pairs(size, func(i int) string { return fmt.Sprintf("%%61%%5B%d%%5D=%%C3%%A9+%%2B", i) })
	}},
}

// formWork returns the work of fingerprinting a form body under c.
func formWork(t *testing.T, c *Compiled, body []byte) int {
	t.Helper()
	st := c.pool.Get().(*state)
	defer c.pool.Put(st)
	st.work, st.sc.work = 0, 0
	if _, err := c.appendCanonical(st, nil, Input{MediaType: formType, Body: body}); err != nil {
		t.Fatalf("%d bytes: %v", len(body), err)
	}
	return st.work + st.sc.work
}

func TestFormWorkIsLinear(t *testing.T) {
	for _, spec := range []struct {
		name string
		spec Spec
	}{
		{"whole", Spec{}},
		{"fields", Spec{Body: []Field{{Pointer: "/a"}, {Pointer: "/a/b"}, {Pointer: "/z", Type: Integer}}}},
	} {
		c := mustCompile(t, spec.spec)
		for _, shape := range hostileForms {
			t.Run(spec.name+"/"+shape.name, func(t *testing.T) {
				worktest.FlatPerByte(t, 2, func(size int) (int, int) {
					body := shape.build(size)
					return formWork(t, c, body), len(body)
				})
			})
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
