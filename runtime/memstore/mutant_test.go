//go:build mutants

package memstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// TestMutants runs the mutation run on the store: every mutant that
// applies to it must fail the conformance suite and the model-based test,
// and one that breaks recovery points the phase suite.
// The store has no way to delete a row from outside, so release-completed
// does not apply.
func TestMutants(t *testing.T) {
	ms := []mutant.Mutant{mutant.CommitThenError, mutant.CompleteWithoutFence, mutant.LoseUpdate, mutant.GuardNeverReleases, mutant.ShortLease,
		mutant.LeaseInWholeSeconds, mutant.TTLCapped, mutant.LargeBodyTruncated, mutant.IdentityJoined, mutant.PhaseTTLCapped, mutant.RacyTakeover}
	mutant.Run(t, target, mutant.Cases(ms, mutant.Conformance, mutant.Model, mutant.Phases))
}
