package mutant_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// envNotApplied runs TestAMutantThatDoesNotApplyIsNotCaught's mutation
// run, in a child process of its own whose failure the test reads.
const envNotApplied = "IDEMGEN_MUTANT_NOT_APPLIED"

// A mutant that does not apply to the store (its Wrap returns nil: a
// release of a completed row on a store without an operator's interface,
// a phase mutant on a store without phases) breaks nothing, and no
// checker catches anything. A mutation run whose list holds one must
// fail, or the score counts a catch that no checker made.
func TestAMutantThatDoesNotApplyIsNotCaught(t *testing.T) {
	mutant.SkipUnderRace(t)
	if os.Getenv(envNotApplied) != "" {
		target := storetest.Target{Open: func(_ *testing.T, clock *storetest.Clock) storetest.Instance {
			if clock == nil {
				return storetest.Instance{Store: memstore.New()}
			}
			return storetest.Instance{Store: memstore.New(memstore.WithClock(clock.Now))}
		}}
		applies := mutant.Mutant{
			Name: "applies-to-nothing",
			What: "a mutant whose Wrap applies to no store",
			Wrap: func(idemstore.Store) idemstore.Store { return nil },
		}
		mutant.Run(t, target, mutant.Cases([]mutant.Mutant{applies}, mutant.Conformance))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAMutantThatDoesNotApplyIsNotCaught$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envNotApplied+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		score := "no score logged"
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "mutation score") {
				score = strings.TrimSpace(line)
			}
		}
		t.Fatalf("the mutation run scored a mutant that applies to no store as caught, and passed (%s)", score)
	}
}
