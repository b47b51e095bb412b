package mutant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/model"
)

// envCase names, in the child process that runs it, the case and checker
// to run ("mutant/checker").
const envCase = "IDEMGEN_MUTANT_CASE"

// childTimeout bounds one checker's run of one mutant. A checker that
// needs longer to catch a mutant has not caught it.
const childTimeout = 90 * time.Second

// Checker is a suite that a broken store must fail.
type Checker struct {
	Name string
	Run  func(t *testing.T, target storetest.Target)
	// TxOnly: the suite drives transactional claims alone, so only a
	// mutant that breaks them (Mutant.Tx) is for it to catch.
	TxOnly bool
	// Phases: the suite drives recovery points alone; a mutant that
	// breaks them (Mutant.Phase) is for it, and no other.
	Phases bool
	// OneCallAtATime: the suite makes one call at a time, so a mutant
	// that shows only when calls overlap (Mutant.Overlap) is not for it.
	OneCallAtATime bool
}

// The conformance suites, plain and transactional.
var (
	Conformance   = Checker{Name: "conformance", Run: storetest.Run}
	ConformanceTx = Checker{Name: "conformance-tx", Run: storetest.RunTx, TxOnly: true}
	// Phases is the recovery-point suite, for a store that keeps phases.
	Phases = Checker{Name: "phases", Run: storetest.RunPhases, Phases: true}
)

// children is how many child processes run at once: the suites spend most
// of their time waiting for leases to run out.
const children = 3

// Model is the model-based test, sized for the mutation run: two seeds of
// a thousand steps, which every mutant fails within its first seed, and a
// second to shrink the failing sequence.
var Model = Checker{Name: "model", OneCallAtATime: true, Run: func(t *testing.T, target storetest.Target) {
	model.Run(t, model.Options{Runs: 2, Steps: 1000, ShrinkFor: time.Second}, target)
}}

// Case is a mutant and the checkers that must each catch it.
type Case struct {
	Mutant Mutant
	// Break, when set, breaks the store's own code for the whole child
	// process that runs the case, before the checker runs: for a mutant
	// that needs the store's internals (a test-only hook of the store's
	// package). Wrap may then be nil.
	Break    func()
	Checkers []Checker
}

// Run runs every case against target: each of its checkers on the store
// broken by its mutant, in a child process of the test binary (the test
// that called Run, run again with the case named in its environment),
// stopping at the first failure. A checker that passes a mutant fails t.
// Before the mutants, each checker runs on the store wrapped by a mutant
// that changes nothing, and must pass: the mutants' failures are theirs,
// not the wrapper's. Run logs the score, mutants caught of mutants run,
// by checker.
func Run(t *testing.T, target storetest.Target, cases []Case) {
	SkipUnderRace(t)
	if name := os.Getenv(envCase); name != "" {
		runChild(t, target, cases, name)
		return
	}
	checkers := map[string]Checker{}
	for _, c := range cases {
		for _, ch := range c.Checkers {
			checkers[ch.Name] = ch
		}
	}
	for _, name := range sortedKeys(checkers) {
		ch := checkers[name]
		t.Run("unbroken/"+ch.Name, func(t *testing.T) { ch.Run(t, broken(target, none, nil)) })
	}
	if t.Failed() {
		t.Fatal("a checker fails the store wrapped by a mutant that changes nothing; the mutation run would mean nothing")
	}
	var (
		mu          sync.Mutex
		caught, ran = map[string]int{}, map[string]int{}
		wg          sync.WaitGroup
		slots       = make(chan struct{}, children)
	)
	for _, c := range cases {
		for _, ch := range c.Checkers {
			ran[ch.Name]++
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				out, got := runParent(t, c.Mutant.Name+"/"+ch.Name)
				mu.Lock()
				defer mu.Unlock()
				switch got {
				case caughtIt:
					caught[ch.Name]++
				case notApplied:
					t.Errorf("mutant %s does not apply to the store, so %s cannot catch it; take it out of the store's list:\n%s", c.Mutant.Name, ch.Name, out)
				default:
					t.Errorf("mutant %s (%s) survived %s:\n%s", c.Mutant.Name, c.Mutant.What, ch.Name, out)
				}
			}()
		}
	}
	wg.Wait()
	var score []string
	total, totalRan := 0, 0
	for _, name := range sortedKeys(ran) {
		score = append(score, fmt.Sprintf("%s %d of %d", name, caught[name], ran[name]))
		total += caught[name]
		totalRan += ran[name]
	}
	t.Logf("mutation score: %d of %d runs caught (%s)", total, totalRan, strings.Join(score, ", "))
}

// The child's verdict, one line of its output each: a checker's suite
// failed on a store that opened and was broken as the mutant says
// (caught); the mutant does not apply to the store (notApplied); or the
// store did not open (notOpened). Only caught is a catch: a failure of
// the child before or around the checker's suite is not the checker's.
const (
	verdictCaught     = "mutant-verdict: caught"
	verdictNotApplied = "mutant-verdict: does not apply"
	verdictNotOpened  = "mutant-verdict: the store did not open"
)

// outcome is what a child's run of a case came to.
type outcome int

const (
	survived outcome = iota
	caughtIt
	notApplied
)

// runParent runs the child for name and reports its output and what it
// came to: caught only when it exited with status 1, within its time,
// having said that a checker's suite failed, and nothing else.
func runParent(t *testing.T, name string) (string, outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(top)+"$", "-test.count=1", "-test.failfast")
	cmd.Env = append(os.Environ(), envCase+"="+name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	var ee *exec.ExitError
	exited := errors.As(err, &ee)
	switch {
	case strings.Contains(text, verdictNotApplied):
		return tail(text, 4000), notApplied
	case exited && ee.ExitCode() == 1 && ctx.Err() == nil && hasLine(text, verdictCaught) &&
		!strings.Contains(text, verdictNotOpened) && strings.Contains(text, "--- FAIL: "):
		return tail(text, 4000), caughtIt
	}
	return tail(text, 4000), survived
}

// hasLine reports whether line is one of text's lines.
func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// runChild runs the case and checker name names.
func runChild(t *testing.T, target storetest.Target, cases []Case, name string) {
	mutant, checker, _ := strings.Cut(name, "/")
	for _, c := range cases {
		if c.Mutant.Name != mutant {
			continue
		}
		for _, ch := range c.Checkers {
			if ch.Name != checker {
				continue
			}
			if c.Break != nil {
				c.Break()
			}
			wrap := c.Mutant.Wrap
			if wrap == nil {
				wrap = func(s idemstore.Store) idemstore.Store { return s }
			}
			var v verdict
			// The verdict goes to the parent on a line of its own, once
			// every subtest of the suite, parallel ones too, has ended.
			t.Cleanup(func() {
				fmt.Println()
				switch {
				case v.notApplied.Load():
					fmt.Println(verdictNotApplied)
				case v.notOpened.Load():
					fmt.Println(verdictNotOpened)
				case t.Failed():
					fmt.Println(verdictCaught)
				}
			})
			ch.Run(t, broken(target, wrap, &v))
			return
		}
	}
	t.Fatalf("mutant: no case %q", name)
}

// none wraps a store in a mutant that changes nothing.
func none(s idemstore.Store) idemstore.Store { return wrap(s, newCalls(s)) }

// Unchanged is a mutant that changes nothing: a checker's run on it is the
// control of its runs on the others, and must pass.
var Unchanged = Mutant{Name: "unchanged", What: "every call passes through the wrapper unchanged", Wrap: none}

// verdict is what happened to the stores a child opened, beside its
// checker's suite: a store that did not open, or one that the mutant
// does not apply to, makes the suite's failure no catch.
type verdict struct {
	notApplied, notOpened atomic.Bool
}

// broken is target with every store it opens wrapped by w; v, when not
// nil, records a store that did not open or that w does not apply to.
func broken(target storetest.Target, w func(idemstore.Store) idemstore.Store, v *verdict) storetest.Target {
	if v == nil {
		v = new(verdict)
	}
	open := target.Open
	target.Open = func(t *testing.T, clock *storetest.Clock) storetest.Instance {
		opened := false
		defer func() {
			if !opened {
				v.notOpened.Store(true)
			}
		}()
		in := open(t, clock)
		opened = true
		s := w(in.Store)
		if s == nil {
			v.notApplied.Store(true)
			t.Fatalf("mutant: the mutant does not apply to %T", in.Store)
		}
		in.Store = s
		if crash := in.Crash; crash != nil {
			in.Crash = func(ctx context.Context, tx idemstore.Tx) error { return crash(ctx, Unwrap(tx)) }
		}
		return in
	}
	return target
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// For reports whether m is for ch to catch: a phase mutant for the phase
// suite alone, a transactional one for every other suite, any other for
// every suite but the transactional one, and one that shows only when
// calls overlap not for a suite that makes one call at a time.
func (ch Checker) For(m Mutant) bool {
	switch {
	case m.Phase != ch.Phases:
		return false
	case m.Overlap && ch.OneCallAtATime:
		return false
	}
	return m.Tx || !ch.TxOnly
}

// Cases is a case for each of ms, each to be caught by every one of
// checkers that is for it (Checker.For).
func Cases(ms []Mutant, checkers ...Checker) []Case {
	out := make([]Case, len(ms))
	for i, m := range ms {
		out[i] = Case{Mutant: m}
		for _, ch := range checkers {
			if ch.For(m) {
				out[i].Checkers = append(out[i].Checkers, ch)
			}
		}
	}
	return out
}

// SkipUnderRace skips t under the race detector: the mutation run checks
// the checkers, not the stores' concurrency, and runs once, in the plain
// run.
func SkipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the mutation run runs without the race detector")
	}
}
