//go:build idemwork

package load

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
)

// loadSteps loads spec and returns the steps the schema facts took and the
// schema references ($refs) the spec holds.
func loadSteps(t testing.TB, spec []byte) (steps, refs int) {
	t.Helper()
	var err error
	steps = work.Count(func() { _, _, err = LoadData(context.Background(), spec, "spec.yaml", Options{}) })
	if err != nil {
		t.Fatal(err)
	}
	return steps, strings.Count(string(spec), "$ref")
}

// A spec is untrusted input: a partner's spec must not be able to stall
// the generator. Schemas that name one another multiply the paths between
// them, so the type, length limit and lookup of a body field must not be
// worked out afresh from every schema a lookup meets (a spec of 1,500
// schemas, each naming the ones before it, would take minutes). The work,
// counted in steps from a schema to another, grows with the references.
func TestSchemaWorkGrowsWithTheReferences(t *testing.T) {
	const small, large = 40, 160
	for _, shape := range []string{"allOf", "oneOf", "anyOf", "properties", "items", "mixed", "chain",
		"allOf+amount", "oneOf+amount", "mixed+amount", "chain+amount"} {
		t.Run(shape, func(t *testing.T) {
			n := small
			if shape == "chain" || shape == "chain+amount" {
				n *= 10 // a chain's references grow with n, not n²
			}
			stepsS, refsS := loadSteps(t, mutualSpec(n, 1, shape))
			stepsL, refsL := loadSteps(t, mutualSpec(4*n, 1, shape))
			perRefS, perRefL := float64(stepsS)/float64(refsS), float64(stepsL)/float64(refsL)
			t.Logf("%d schemas: %d steps for %d references; %d schemas: %d steps for %d references", n, stepsS, refsS, 4*n, stepsL, refsL)
			if perRefL > 1.5*perRefS {
				t.Errorf("steps per reference grew from %.1f to %.1f as the references grew %.0f×", perRefS, perRefL, float64(refsL)/float64(refsS))
			}
		})
	}
}

// Operations that share a body schema share what is worked out about it:
// no operation walks the schema afresh, so the work does not grow with the
// operations times the schemas.
func TestOperationsShareSchemaWork(t *testing.T) {
	const n = 80
	few, _ := loadSteps(t, mutualSpec(n, 2, "allOf+amount"))
	many, _ := loadSteps(t, mutualSpec(n, 32, "allOf+amount"))
	t.Logf("%d schemas: %d steps for 2 operations, %d for 32", n, few, many)
	if many > few+32*10 {
		t.Errorf("%d steps for 32 operations, %d for 2: the 30 more operations cost %d steps, not a few each", many, few, many-few)
	}
}
