package idem

import (
	"testing"
	"time"
)

// A 409 request-in-progress asks a client to come back after about as
// long as the operation's handler takes, plus a jitter of up to as much
// again, rounded down to whole seconds (0 for a handler that takes
// milliseconds), never beyond what is left of the lease.
func TestInFlightRetryAfter(t *testing.T) {
	cases := []struct {
		name      string
		latency   time.Duration
		remaining time.Duration
		jitter    func(n int) int
		want      int
	}{
		{"fast handler, no jitter", 40 * time.Millisecond, time.Minute, func(int) int { return 0 }, 0},
		{"fast handler, most jitter", 40 * time.Millisecond, time.Minute, func(n int) int { return n - 1 }, 0},
		{"handler of 600 ms, most jitter", 600 * time.Millisecond, time.Minute, func(n int) int { return n - 1 }, 1},
		{"no run observed yet", 0, time.Minute, func(n int) int { return n - 1 }, 2},
		{"slow handler, no jitter", 4500 * time.Millisecond, time.Minute, func(int) int { return 0 }, 4},
		{"slow handler, most jitter", 4500 * time.Millisecond, time.Minute, func(n int) int { return n - 1 }, 9},
		{"slow handler, lease nearly over", 4500 * time.Millisecond, 3 * time.Second, func(n int) int { return n - 1 }, 3},
		{"lease all but over", 4500 * time.Millisecond, 200 * time.Millisecond, func(n int) int { return n - 1 }, 0},
	}
	for _, c := range cases {
		e := &Engine{jitter: c.jitter}
		op := &operation{}
		if c.latency > 0 {
			op.latency.Observe(c.latency)
		}
		if got := e.inFlightRetryAfter(op, c.remaining); got != c.want {
			t.Errorf("%s: Retry-After %d, want %d", c.name, got, c.want)
		}
	}
}
