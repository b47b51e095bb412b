//go:build idemwork

package load

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/work"
)

// A spec's names are untrusted input: "did you mean" compares a misspelt
// name with every candidate, and a distance bounded by 3 needs only the
// diagonals around the main one, so the work grows with the names' length,
// not with the product of their lengths. Names that differ from the start
// stop at the first rows; names that differ only at the end run the whole
// band.
func TestSuggestWorkGrowsWithTheNames(t *testing.T) {
	steps := func(n int) int {
		long := strings.Repeat("a", n)
		cands := []string{"p" + long, long + "xyzw", long[:n/2] + "q" + long[n/2:]}
		return work.Count(func() { suggest("q"+long+"b", cands) })
	}
	const n = 2000
	small, large := steps(n), steps(4*n)
	t.Logf("names of %d bytes: %d steps; of %d bytes: %d steps", n, small, 4*n, large)
	if small == 0 {
		t.Fatal("the comparison counts no steps")
	}
	if large > 5*small {
		t.Errorf("%d steps for names of %d bytes, %d for %d: the work grows faster than the names", large, 4*n, small, n)
	}
	if large > 3*7*(4*n+5) {
		t.Errorf("%d steps for names of %d bytes: more than the 7 diagonals a distance of 3 needs, for each of 3 names", large, 4*n)
	}
}
