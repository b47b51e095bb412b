package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store: every mutant must fail
// the conformance suite and the model-based test, and those that break
// transactional claims the transactional suite too. A store of its own
// keeps what currval remembers on a session for the next request (its
// reset skips DISCARD SEQUENCES), which the transactional suite's session
// check must catch.
func TestMutants(t *testing.T) {
	testURL(t)
	cases := mutant.Cases(mutant.All(), mutant.Conformance, mutant.ConformanceTx, mutant.Model)
	cases = append(cases, mutant.Case{
		Mutant: mutant.Mutant{
			Name: "reset-skips-sequences",
			What: "the session reset leaves what currval and lastval remember to the next request (DISCARD SEQUENCES skipped)",
		},
		Break:    func() { pgstore.SkipReset("DISCARD SEQUENCES") },
		Checkers: []mutant.Checker{mutant.ConformanceTx},
	})
	mutant.Run(t, target(), cases)
}
