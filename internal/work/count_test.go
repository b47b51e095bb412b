//go:build idemwork

package work

import "testing"

// Count reports the steps its function added, and only those.
func TestCount(t *testing.T) {
	Add(5) // before: not counted
	got := Count(func() {
		Add(2)
		Add(0)
		for range 3 {
			Add(1)
		}
	})
	if got != 5 {
		t.Errorf("Count = %d, want 5", got)
	}
	if inner := Count(func() {}); inner != 0 {
		t.Errorf("Count of nothing = %d", inner)
	}
}
