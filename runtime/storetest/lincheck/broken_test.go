package lincheck

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// secondWins is a broken store: a claim that meets a completed row of the
// same request wins it again, and the second winner's completion is
// swallowed. The handler then runs twice for a key.
type secondWins struct{ idem.Store }

func (s *secondWins) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && !res.Won && res.Existing.State == idem.StateCompleted && bytes.Equal(res.Existing.Fingerprint, c.Fingerprint) {
		return idem.Result{Won: true}, nil
	}
	return res, err
}

func (s *secondWins) Complete(ctx context.Context, id idem.Identity, token string, resp idem.Response) error {
	if err := s.Store.Complete(ctx, id, token, resp); !errors.Is(err, idem.ErrFenced) {
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
