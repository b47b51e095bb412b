//go:build idemwork

package fingerprint

import (
	"testing"

	"github.com/idemgen/idemgen/internal/work"
	"github.com/idemgen/idemgen/runtime/internal/worktest"
)

// Pointers are the spec's, bodies the client's. A walk along a pointer
// skips every member it passes and reads the one it follows again one
// level down, so its work is at most the body's size times the pointer's
// depth plus one, and the depth is the spec's: for a fixed spec the work per
// body byte must stay flat, whatever members, nesting, escapes or arrays
// the client puts in its way (hostilePointerBodies). These tests count it
// (bytes skipped, names compared) from 1 KiB to the 1 MiB body limit.

// walkWork returns the work of fingerprinting body under c, as a request
// whose key is read at keyPointer ("" for none) would: the canonical scan
// and the walks along the pointers.
func walkWork(t *testing.T, c *Compiled, body []byte, keyPointer string) int {
	t.Helper()
	in := Input{MediaType: jsonType, Body: body}
	if keyPointer != "" {
		if _, err := c.keyPath(keyPointer); err != nil { // compiled once, before counting
			t.Fatal(err)
		}
	}
	var err error
	steps := work.Count(func() {
		if keyPointer == "" {
			_, err = c.Sum(in)
		} else {
			_, _, _, err = c.SumLookup(in, keyPointer)
		}
	})
	if err != nil {
		t.Fatalf("%d bytes: %v", len(body), err)
	}
	return len(body) + steps
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
