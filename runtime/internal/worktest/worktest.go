// Package worktest is the check the bounded-work tests of the request
// path share: the work an algorithm does per input byte, counted rather
// than timed (internal/work, in a build with the idemwork tag), stays flat
// as its worst inputs grow from 1 KiB to the limit a server puts on them.
package worktest

import "testing"

// Sizes returns the input sizes the worst inputs are built at: 1 KiB to
// 1 MiB, the engine's default body limit and net/http's default limit on a
// request's headers, the request line included (http.DefaultMaxHeaderBytes).
// Under the race detector they stop at 256 KiB: the work counted is the
// same with it or without, and these tests run on one goroutine, so the
// largest size would add minutes and no check.
func Sizes() []int {
	if raceEnabled {
		return []int{1 << 10, 1 << 14, 1 << 18}
	}
	return []int{1 << 10, 1 << 14, 1 << 18, 1 << 20}
}

// FlatPerByte fails t when the work per byte at any size exceeds limit
// times the work per byte at the smallest. work builds the input for a
// size and returns the steps counted and the input's length. A limit of 2
// leaves room for comparison sorts, whose work per byte grows with the
// logarithm of their count, and for nothing that grows faster. It stops at
// the first size that fails: the sizes after it would take a quadratic
// algorithm hours.
func FlatPerByte(t testing.TB, limit float64, work func(size int) (steps, bytes int)) {
	t.Helper()
	var first float64
	for i, size := range Sizes() {
		n, bytes := work(size)
		per := float64(n) / float64(bytes)
		t.Logf("%8d bytes: %10d steps, %.2f a byte", bytes, n, per)
		if i == 0 {
			first = per
		} else if per > limit*first {
			t.Fatalf("%d bytes cost %.2f steps a byte, %.1f× the %.2f of about %d bytes", bytes, per, per/first, first, Sizes()[0])
		}
	}
}
