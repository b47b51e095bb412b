package lincheck

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// secondWins is a broken store: a claim that meets a completed row of the
// same request wins it again, and the second winner's completion is
// swallowed. The handler then runs twice for a key.
type secondWins struct{ idemstore.Store }

func (s *secondWins) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && !res.Won && res.Existing.State == idemstore.StateCompleted && bytes.Equal(res.Existing.Fingerprint, c.Fingerprint) {
		return idemstore.Result{Won: true}, nil
	}
	return res, err
}

func (s *secondWins) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	if err := s.Store.Complete(ctx, id, token, resp); !errors.Is(err, idemstore.ErrFenced) {
		return err
	}
	return nil
}

// The check catches a store that lets a second claim win: porcupine finds
// the history not linearizable, writes its visualization, and the effects
// show two executions of one key.
func TestLinearizabilityCheckCatchesASecondWinner(t *testing.T) {
	effects := filepath.Join(t.TempDir(), "effects")
	rep := history(t, run{
		name:    "broken",
		env:     []string{envService + "=broken", envEffects + "=" + effects},
		effects: fileEffects(effects),
	}, time.Second, seed(t))
	violations, viz := check(rep, model{})
	t.Logf("%s, %d violations", summary(rep), len(violations))
	if viz == "" || len(violations) == 0 || !strings.HasPrefix(violations[0], "porcupine:") {
		t.Fatalf("violations %q, visualization %q; want porcupine to refuse the history", violations, viz)
	}
	var twice bool
	for _, v := range violations {
		twice = twice || strings.Contains(v, "recorded 2 times")
	}
	if !twice {
		t.Errorf("violations %q; want a key whose effect is recorded twice", violations)
	}
	t.Logf("porcupine's visualization of the broken store's history: %s", viz)
}

// mutantRun is r with its store broken by m and no fault injected: only
// the mutant can make the history wrong.
func mutantRun(r run, m mutant.Mutant) run {
	r.name += " " + m.Name
	r.env = append(r.env[:len(r.env):len(r.env)], envMutant+"="+m.Name)
	r.faults, r.kill, r.hangUps = nil, false, false
	return r
}

// wantViolation fails t unless one of violations contains want.
func wantViolation(t *testing.T, violations []string, want string) {
	t.Helper()
	for _, v := range violations {
		if strings.Contains(v, want) {
			return
		}
	}
	t.Errorf("violations %q; want one that says %q", violations, want)
}

// A SQLite store whose transaction's Commit commits and then reports an
// error, one commit in three, with no fault injected: the engine answers
// those requests 503, not processed, while their effects are committed.
// No fault excuses the 503, so the check refuses the history, and the
// effects read back name the requests that were told otherwise.
func TestLinearizabilityCheckCatchesACommitThatReportsFailure(t *testing.T) {
	r, _ := sqliteRun(t)
	r = mutantRun(r, mutant.CommitThenError)
	rep := history(t, r, time.Second, seed(t))
	violations, _ := check(rep, r.model)
	t.Logf("%s, %d violations", summary(rep), len(violations))
	wantViolation(t, violations, "porcupine:")
	wantViolation(t, violations, "it was not processed, and it owns the committed effect")
}

// A key whose guard an earlier holder leaked answers 409 to every request,
// though nobody else is on it. The PostgreSQL model allows a 409 to a
// claim that lost the key's guard only while another request is on the
// key, so it refuses a key that stays busy alone.
func TestLinearizabilityCheckCatchesAStuckKey(t *testing.T) {
	r := mutantRun(memoryRun(t), mutant.GuardNeverReleases)
	r.model = postgresModel()
	rep := history(t, r, time.Second, seed(t))
	violations, _ := check(rep, r.model)
	t.Logf("%s, %d violations", summary(rep), len(violations))
	wantViolation(t, violations, "porcupine:")
}
