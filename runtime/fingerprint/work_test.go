//go:build idemwork

package fingerprint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// A request body is the client's to choose, and it is read before anything
// is claimed: the work of reading it must grow with its size and with
// nothing else the client controls. These tests count that work (key
// comparisons, bytes hashed, compared and moved) on the worst bodies we
// know how to build (hostile_test.go), and hold the work per input byte
// flat from 1 KiB to the engine's default body limit of 1 MiB.

// canonicalWork returns the work of canonicalizing body with the case-fold
// check on, as for a body fingerprinted whole, and the error.
func canonicalWork(body []byte) (int, error) {
	var s scanner
	s.folds = true
	var err error
	steps := work.Count(func() { err = s.canonicalize(body) })
	return len(body) + steps, err
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
				var err error
				steps := work.Count(func() { _, err = c.Sum(Input{MediaType: jsonType, Body: body}) })
				if err != nil && !strings.Contains(err.Error(), caseVariants) {
					t.Fatalf("%d bytes: %v", len(body), err)
				}
				return len(body) + steps, len(body)
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
	var err error
	steps := work.Count(func() { _, err = c.Sum(Input{MediaType: formType, Body: body}) })
	if err != nil {
		t.Fatalf("%d bytes: %v", len(body), err)
	}
	return steps
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

// stoppedWork fingerprints body under c with a context that ends after
// its first look, and returns the error and the work done: the bytes read
// and every counted step.
func stoppedWork(c *Compiled, mediaType string, body []byte) (int, error) {
	st := c.get(&endsAfter{Context: context.Background(), looks: 1})
	defer c.put(st)
	st.sc.pos = 0
	var err error
	steps := work.Count(func() {
		_, err = c.appendCanonical(st, nil, Input{MediaType: mediaType, Body: body})
	})
	return st.sc.pos + steps, err
}

// A 1 MiB hostile body whose client hangs up once the first KiB has been
// read costs no more than a few KiB of work: the fingerprint looks at the
// context at the start and every checkEvery bytes, and stops at the first
// look that finds it done.
func TestFingerprintStopsWhenTheContextEnds(t *testing.T) {
	const bound = 4 * checkEvery
	whole, fields := mustCompile(t, Spec{}), mustCompile(t, Spec{Body: pointerFields()})
	for _, tc := range []struct {
		kind   string
		c      *Compiled
		media  string
		shapes []hostileBody
	}{
		{"JSON, whole", whole, jsonType, hostileJSON},
		{"JSON, fields", fields, jsonType, hostilePointerBodies},
		{"form", whole, formType, hostileForms},
	} {
		for _, shape := range tc.shapes {
			body := shape.build(1 << 20)
			steps, err := stoppedWork(tc.c, tc.media, body)
			t.Logf("%s, %s: %d steps", tc.kind, shape.name, steps)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s, %s: %v, want the context's end", tc.kind, shape.name, err)
			}
			if steps > bound {
				t.Errorf("%s, %s: %d steps after the client left, want at most %d", tc.kind, shape.name, steps, bound)
			}
		}
	}
}
