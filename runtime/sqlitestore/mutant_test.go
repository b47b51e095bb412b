//go:build mutants

package sqlitestore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store, with the phases'
// migration applied: every mutant must fail the conformance suites and
// the model-based test, and one that breaks recovery points the phase
// suite.
func TestMutants(t *testing.T) {
	phased := target
	phased.Open = phaseTarget.Open
	mutant.Run(t, phased, mutant.Cases(mutant.All(), mutant.Conformance, mutant.ConformanceTx, mutant.Model, mutant.Phases))
}
