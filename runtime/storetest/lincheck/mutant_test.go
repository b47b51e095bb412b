package lincheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// mutantDuration is how long each mutant's run sends requests: every
// mutant here breaks a key within the first few requests.
const mutantDuration = time.Second

// TestMutants is the linearizability check's part of the mutation run
// (package mutant): each store, broken by each mutant that a client can
// see with no fault injected, must give a history the check refuses. The
// other mutants (a completion that is fenced, a release of a completed
// row) need a takeover, which only a fault brings about; and a Complete
// that stores and then reports an error leaves the key as a correct one
// would on a non-transactional store, where the engine sends the
// handler's answer anyway. The conformance suites and the model-based
// test catch those.
func TestMutants(t *testing.T) {
	mutant.SkipUnderRace(t)
	plain := []mutant.Mutant{mutant.LoseUpdate, mutant.GuardNeverReleases}
	tx := []mutant.Mutant{mutant.CommitThenError, mutant.LoseUpdate, mutant.GuardNeverReleases}
	sqlite := func(t *testing.T) run {
		r, _ := sqliteRun(t)
		return r
	}
	for _, s := range []struct {
		name    string
		run     func(t *testing.T) run
		mutants []mutant.Mutant
	}{
		{"memory", memoryRun, plain},
		{"sqlite", sqlite, tx},
		{"postgres", postgresRun, tx},
		{"redis", redisRun, plain},
	} {
		t.Run(s.name, func(t *testing.T) {
			caught := 0
			for _, m := range s.mutants {
				r := mutantRun(s.run(t), m)
				rep := history(t, r, mutantDuration, seed(t))
				// A broken store's history can cost porcupine a long
				// search to refuse; a minute bounds it, so that the
				// package stays inside go test's default timeout.
				violations, viz := checkWithin(rep, r.model, time.Minute)
				if viz != "" {
					_ = os.RemoveAll(filepath.Dir(viz))
				}
				if len(violations) == 0 {
					t.Errorf("mutant %s (%s) survived: %s, no violation", m.Name, m.What, summary(rep))
					continue
				}
				caught++
			}
			t.Logf("mutation score: lincheck %d of %d", caught, len(s.mutants))
		})
	}
}
