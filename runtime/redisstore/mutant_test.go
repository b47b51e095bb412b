//go:build mutants

package redisstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store, on a single Redis: every
// mutant must fail the conformance suite and the model-based test, and
// one that breaks recovery points the phase suite.
func TestMutants(t *testing.T) {
	mutant.Run(t, target(singleClient(t)), mutant.Cases(mutant.All(), mutant.Conformance, mutant.Model, mutant.Phases))
}
