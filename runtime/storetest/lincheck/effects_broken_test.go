package lincheck

import (
	"strings"
	"testing"
	"time"
)

// brokenDuration is how long each run of a broken version sends
// requests, and brokenGap the mean gap between the kills the processor
// and the receiver make: a few a run, at the points the broken versions
// of the charge and the receipt give themselves away.
const (
	brokenDuration = 3 * time.Second
	brokenGap      = 500 * time.Millisecond
	// brokenTries bounds the runs of one broken version: a kill falls
	// where it breaks it by chance, and a loaded machine makes few
	// requests in a run (150 in one here, beside three busy loops). A
	// version caught in its first run, as they mostly are, costs one.
	brokenTries = 5
)

// Each broken version of the effects mode, run under kills, gives the
// violation of the check that guards what it breaks: a charge under a key
// drawn on every run charges a request again when a retry runs it after a
// kill; a receipt sent before the commit is delivered for a run a kill
// rolled back; a runner that counts a refused delivery as delivered leaves
// committed requests without their receipt (these three on SQLite); a
// store that records phases and never finds them again (PostgreSQL, a
// Redis Cluster) calls the processor on a retry after its charge's phase
// was recorded.
func TestEffectsChecksCatchBrokenVersions(t *testing.T) {
	sqlite := func(t *testing.T) run {
		r, _ := sqliteRun(t)
		return r
	}
	for _, b := range []struct {
		broken, want, store string
		run                 func(t *testing.T) run
	}{
		{brokenFreshKey, "the processor charged", "sqlite", sqlite},
		{brokenDirectReceipt, "that run never committed", "sqlite", sqlite},
		{brokenDropFailed, "its receipt was never delivered", "sqlite", sqlite},
		{brokenForgetPhases, "a recorded phase ran again", "postgres", postgresRun},
		{brokenForgetPhases, "a recorded phase ran again", "redis-cluster", clusterRun},
	} {
		t.Run(b.broken+"/"+b.store, func(t *testing.T) {
			for try := 1; ; try++ {
				r := b.run(t)
				r, rep, s := effectsHistory(t, r, b.broken, brokenDuration, brokenGap, seed(t))
				violations, f := checkSideEffects(rep, s)
				caught := 0
				for _, v := range violations {
					if strings.Contains(v, b.want) {
						caught++
					}
				}
				t.Logf("%s, try %d: %s; effects: %s; %d violations, %d that say %q", r.name, try, summary(rep), f, len(violations), caught, b.want)
				if caught > 0 {
					for _, v := range violations[:min(len(violations), 6)] {
						t.Log(v)
					}
					return
				}
				if try == brokenTries {
					t.Fatalf("%s survived %d runs: violations %q", b.broken, try, violations)
				}
			}
		})
	}
}
