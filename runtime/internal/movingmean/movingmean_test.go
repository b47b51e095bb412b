package movingmean

import (
	"testing"
	"time"
)

// The first observation is the mean; each later one moves it by an
// eighth of the difference.
func TestDuration(t *testing.T) {
	var m Duration
	if m.Mean() != 0 {
		t.Fatalf("zero value reads %v", m.Mean())
	}
	m.Observe(800 * time.Millisecond)
	if m.Mean() != 800*time.Millisecond {
		t.Fatalf("after one: %v", m.Mean())
	}
	m.Observe(0)
	if m.Mean() != 700*time.Millisecond {
		t.Fatalf("after 800 ms and 0: %v, want 700 ms", m.Mean())
	}
}

// One slow run among many moves the mean by an eighth of its excess.
func TestDurationOneSlowRun(t *testing.T) {
	var m Duration
	for range 50 {
		m.Observe(time.Second)
	}
	m.Observe(time.Minute)
	if got := m.Mean(); got < time.Second || got > 9*time.Second {
		t.Errorf("mean %v after 50 runs of 1 s and one of 1 min, want between 1 s and 9 s", got)
	}
}
