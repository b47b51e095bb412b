//go:build mutants

package lincheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// A mutant's run sends requests for mutantDuration: every mutant here
// breaks a key within the first few hundred requests. A run that a loaded
// machine held to fewer than minMutantOps, with no violation, proves
// nothing of the mutant's survival: it is run again, on a new store, for
// twice as long, up to maxMutantDuration.
const (
	mutantDuration    = time.Second
	maxMutantDuration = 8 * time.Second
	minMutantOps      = 300
)

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
	plain := []mutant.Mutant{mutant.LoseUpdate, mutant.GuardNeverReleases, mutant.LargeBodyTruncated}
	tx := []mutant.Mutant{mutant.CommitThenError, mutant.LoseUpdate, mutant.GuardNeverReleases, mutant.LargeBodyTruncated}
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
			// The control: the store wrapped by a mutant that changes
			// nothing passes, so that a mutant's violations are its own.
			if violations, res := mutantHistory(t, s.run, mutant.Unchanged); len(violations) > 0 || res != porcupine.Ok {
				t.Fatalf("the check fails the store wrapped by a mutant that changes nothing (porcupine: %s): %q; the mutation run would mean nothing", res, violations)
			}
			caught := 0
			for _, m := range s.mutants {
				violations, res := mutantHistory(t, s.run, m)
				switch {
				case res == porcupine.Unknown:
					// Out of time is no verdict: the mutant is not caught
					// by what the effects alone show.
					t.Errorf("mutant %s (%s): porcupine ran out of time on its history; violations %q", m.Name, m.What, violations)
				case len(violations) == 0:
					t.Errorf("mutant %s (%s) survived: no violation", m.Name, m.What)
				default:
					caught++
				}
			}
			t.Logf("mutation score: lincheck %d of %d", caught, len(s.mutants))
		})
	}
}

// mutantHistory runs a store that mk makes, broken by m, with no fault
// injected, and checks its history: the violations and porcupine's
// verdict. A history too short to count is made again, longer.
func mutantHistory(t *testing.T, mk func(*testing.T) run, m mutant.Mutant) ([]string, porcupine.CheckResult) {
	t.Helper()
	for d := mutantDuration; ; d *= 2 {
		r := mutantRun(mk(t), m)
		rep := history(t, r, d, seed(t))
		// A broken store's history can cost porcupine a long search to
		// refuse; a minute bounds it, so that the package stays inside go
		// test's default timeout.
		violations, viz, res := checkWithin(rep, r.model, time.Minute)
		if viz != "" {
			_ = os.RemoveAll(filepath.Dir(viz))
		}
		t.Logf("%s: %s, porcupine %s, %d violations", m.Name, summary(rep), res, len(violations))
		if len(violations) > 0 || res != porcupine.Ok || len(rep.ops) >= minMutantOps || d >= maxMutantDuration {
			return violations, res
		}
		t.Logf("%s: %d operations in %v are too few to count its survival; again for %v", m.Name, len(rep.ops), d, 2*d)
	}
}
