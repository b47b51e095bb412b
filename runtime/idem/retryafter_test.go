package idem

import (
	"testing"
	"time"
)

// A 409 request-in-progress asks a client to come back after about as
// long as the operation's handler takes, plus a jitter of up to as much
// again, never beyond what is left of the lease and never below 1 s.
func TestInFlightRetryAfter(t *testing.T) {
	cases := []struct {
		name      string
		latency   time.Duration
		remaining time.Duration
		jitter    func(n int) int
		want      int
	}{
		{"fast handler, no jitter", 40 * time.Millisecond, time.Minute, func(int) int { return 0 }, 1},
		{"fast handler, most jitter", 40 * time.Millisecond, time.Minute, func(n int) int { return n - 1 }, 2},
		{"no run observed yet", 0, time.Minute, func(n int) int { return n - 1 }, 2},
		{"slow handler, no jitter", 4500 * time.Millisecond, time.Minute, func(int) int { return 0 }, 5},
		{"slow handler, most jitter", 4500 * time.Millisecond, time.Minute, func(n int) int { return n - 1 }, 10},
		{"slow handler, lease nearly over", 4500 * time.Millisecond, 3 * time.Second, func(n int) int { return n - 1 }, 3},
		{"lease all but over", 4500 * time.Millisecond, 200 * time.Millisecond, func(n int) int { return n - 1 }, 1},
	}
	for _, c := range cases {
		e := &Engine{jitter: c.jitter}
		op := &operation{}
		if c.latency > 0 {
			op.latency.observe(c.latency)
		}
		if got := e.inFlightRetryAfter(op, c.remaining); got != c.want {
			t.Errorf("%s: Retry-After %d, want %d", c.name, got, c.want)
		}
	}
}

// The observed latency follows the handler's runs without jumping at one
// slow run.
func TestLatencyMean(t *testing.T) {
	var l latency
	for range 50 {
		l.observe(time.Second)
	}
	l.observe(time.Minute)
	if m := l.mean(); m < time.Second || m > 9*time.Second {
		t.Errorf("mean %v after 50 runs of 1 s and one of 1 min, want between 1 s and 9 s", m)
	}
}
