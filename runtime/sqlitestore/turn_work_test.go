package sqlitestore

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The turn's queues are walked under its lock by every claim that waits,
// every give and every wait that ends: under a storm, thousands of claims
// wait at once. This test counts the comparisons the queues make (their
// less) while n claims queue, half of them leave as their waits end, and
// the rest are handed the turn one by one, and holds the work per claim
// to the logarithm of n: a queue walked whole on each give and each leave
// costs each claim work in proportion to n, and the whole storm n².
func TestTurnWorkPerClaimIsLogarithmic(t *testing.T) {
	sizes := []int{64, 512, 4096, 32768}
	var first float64
	for i, n := range sizes {
		steps := turnStorm(t, n)
		per := float64(steps) / float64(n) / math.Log2(float64(n))
		t.Logf("%6d waiting claims: %9d comparisons, %.2f a claim per log2(n)", n, steps, per)
		if i == 0 {
			first = per
		} else if per > 2*first {
			t.Fatalf("%d waiting claims cost %.2f comparisons a claim per log2(n), %.1f× the %.2f of %d", n, per, per/first, first, sizes[0])
		}
	}
}

// turnStorm queues n claims on a held turn, takes every other one out
// again, gives the turn until it is free, and returns how many
// comparisons the queue made. It checks that the turn went to the claims
// that stayed, in the order of their keys' first waits and, among equals,
// of their arrival.
func turnStorm(t *testing.T, n int) int {
	t.Helper()
	var tr turn
	steps := 0
	tr.claims.less = func(a, b *turnWaiter) bool { steps++; return earlier(a, b) }
	tr.held = true
	base := time.Now()
	waiters := make([]*turnWaiter, n)
	for i := range waiters {
		// Many claims share a first wait, as the retries of one key do.
		since := base.Add(time.Duration(rand.IntN(n/4)) * time.Millisecond)
		waiters[i] = &turnWaiter{since: since, claim: true, ready: make(chan struct{}, 1)}
		tr.enqueue(waiters[i])
	}
	var stayed []*turnWaiter
	for i, w := range waiters {
		if i%2 == 0 {
			tr.remove(w)
		} else {
			stayed = append(stayed, w)
		}
	}
	slices.SortStableFunc(stayed, func(a, b *turnWaiter) int { return a.since.Compare(b.since) })
	for _, want := range stayed {
		tr.give()
		if !want.granted {
			t.Fatalf("the turn did not go to the claim that waited longest (since %v, arrival %d)", want.since.Sub(base), want.arrival)
		}
	}
	tr.give()
	if tr.held {
		t.Fatal("the turn is still held with no one waiting")
	}
	return steps
}
