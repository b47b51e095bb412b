package sqlitestore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store: every mutant must fail
// the conformance suites and the model-based test.
func TestMutants(t *testing.T) {
	mutant.Run(t, target, mutant.Cases(mutant.All(), mutant.Conformance, mutant.ConformanceTx, mutant.Model))
}
