//go:build idemwork

package work

import "sync/atomic"

// steps is every step counted in this process. It exists only in a build
// with the idemwork tag: an ordinary build keeps no count, and no state.
var steps atomic.Int64

// Add counts n steps.
func Add(n int) { steps.Add(int64(n)) }

// Count returns the steps f took. The count is the process's, so f is
// measured alone only while nothing else runs code that counts: the tests
// that count do not run in parallel.
func Count(f func()) int {
	before := steps.Load()
	f()
	return int(steps.Load() - before)
}
