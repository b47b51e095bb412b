package dayreplay

import (
	"strings"
	"testing"
	"time"
)

// A transfer's attempt answered 422 is listed with every attempt under its
// key; the 422 of an amount change, logged under the key and "#changed",
// is what the change must get, and is not.
func TestUnexpectedAnswersListed(t *testing.T) {
	var l attemptLog
	t0 := time.Unix(0, 0)
	l.add("tr-1", t0, "timeout")
	l.add("tr-1", t0.Add(time.Second), "422")
	l.add("tr-2", t0, "409 (Retry-After 2)")
	l.add("tr-2", t0.Add(2*time.Second), "201")
	l.add("tr-2#changed", t0.Add(3*time.Second), "422")
	got := l.unexpected()
	if len(got) != 1 || !strings.HasPrefix(got[0], "tr-1: ") || !strings.Contains(got[0], "0s timeout, 1s 422") {
		t.Errorf("unexpected() = %q, want tr-1 alone with both its attempts", got)
	}
}
