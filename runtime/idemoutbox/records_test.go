package idemoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordStore is a Store of one effect, claimed again and again until its
// delivery is recorded (as if every claim's lease had run out), whose
// records fail the first failFirst times and then wait for gate.
type recordStore struct {
	Store
	records   Records
	failFirst int32
	gate      chan struct{}
	// recording is told of each record that waits for gate.
	recording chan struct{}
	tries     atomic.Int32
	delivered atomic.Bool
}

func (s *recordStore) Records() *Records { return &s.records }

func (s *recordStore) Claim(ctx context.Context, _ int, _ time.Duration, _ string) ([]Message, error) {
	if s.delivered.Load() {
		return nil, ctx.Err()
	}
	return []Message{{ID: 7, Name: "receipt", EffectKey: "ek", Attempts: 1}}, ctx.Err()
}

func (s *recordStore) Delivered(ctx context.Context, _ Message) (time.Duration, error) {
	if s.tries.Add(1) <= s.failFirst {
		return 0, errors.New("the database is busy")
	}
	s.recording <- struct{}{}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	s.delivered.Store(true)
	return 0, nil
}

func (*recordStore) Release(context.Context, Message, string) error { return nil }

func (*recordStore) Prune(context.Context, time.Duration, int) (int, error) { return 0, nil }

// counter counts deliveries.
type counter struct{ n atomic.Int32 }

func (c *counter) deliver(context.Context, Message) error {
	c.n.Add(1)
	return nil
}

// startRunner runs a runner of s until the test ends.
func startRunner(t *testing.T, s Store, deliver Deliver) {
	r, err := NewRunner(Config{Store: s, Deliver: deliver, Backoff: time.Millisecond, Poll: time.Millisecond, Drain: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// A delivery's record that fails is tried again until it succeeds, not
// given up for the effect to be delivered again after its lease.
func TestRecordTriedUntilRecorded(t *testing.T) {
	s := &recordStore{failFirst: 3, gate: make(chan struct{}), recording: make(chan struct{}, 1)}
	close(s.gate)
	var c counter
	startRunner(t, s, c.deliver)
	select {
	case <-s.recording:
	case <-time.After(10 * time.Second):
		t.Fatalf("the record was tried %d times and never again after its failures", s.tries.Load())
	}
	if n := c.n.Load(); n != 1 {
		t.Errorf("delivered %d times, want 1", n)
	}
}

// While one runner's record of a delivery waits, another runner of the
// process on the same Store claims the effect (its lease has run out) and
// passes it over: it is delivered once.
func TestRecordingIsPassedOver(t *testing.T) {
	s := &recordStore{gate: make(chan struct{}), recording: make(chan struct{}, 1)}
	var c counter
	startRunner(t, s, c.deliver)
	<-s.recording
	startRunner(t, s, c.deliver)
	time.Sleep(200 * time.Millisecond)
	if n := c.n.Load(); n != 1 {
		t.Errorf("delivered %d times while the first delivery's record waited, want 1", n)
	}
	close(s.gate)
}

// failingStore hands out the effect 1 once and then, once the runner has
// tried to record its delivery, the effect 2; the record of effect 1
// fails with err every time.
type failingStore struct {
	Store
	err      error
	claims   atomic.Int32
	tries    atomic.Int32
	recorded atomic.Bool
}

func (s *failingStore) Claim(ctx context.Context, _ int, _ time.Duration, _ string) ([]Message, error) {
	switch {
	case s.claims.Load() == 0:
		s.claims.Add(1)
		return []Message{{ID: 1, Name: "receipt", EffectKey: "ek1", Attempts: 1}}, nil
	case s.claims.Load() == 1 && s.tries.Load() > 0:
		s.claims.Add(1)
		return []Message{{ID: 2, Name: "receipt", EffectKey: "ek2", Attempts: 1}}, nil
	}
	return nil, ctx.Err()
}

func (s *failingStore) Delivered(_ context.Context, m Message) (time.Duration, error) {
	if m.ID == 1 {
		s.tries.Add(1)
		return 0, s.err
	}
	s.recorded.Store(true)
	return 0, nil
}

func (*failingStore) Release(context.Context, Message, string) error         { return nil }
func (*failingStore) Prune(context.Context, time.Duration, int) (int, error) { return 0, nil }

// A delivery whose record never succeeds holds up its own effect alone:
// the runner goes on claiming, and delivers and records the next one.
func TestUnrecordedDeliveryHoldsUpNoOtherEffect(t *testing.T) {
	s := &failingStore{err: errors.New("the database refuses it")}
	startRunner(t, s, (&counter{}).deliver)
	deadline := time.Now().Add(5 * time.Second)
	for !s.recorded.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !s.recorded.Load() {
		t.Errorf("in 5 s the runner recorded nothing after a delivery whose record fails (%d tries, %d claims)", s.tries.Load(), s.claims.Load())
	}
}

// A delivery whose effect is gone from the outbox when it is recorded
// (ErrGone: deleted by an operator, or recorded by another runner and
// pruned) is done: its record is not tried again.
func TestGoneEffectIsNotRecordedAgain(t *testing.T) {
	s := &failingStore{err: fmt.Errorf("record delivery of 1: %w", ErrGone)}
	startRunner(t, s, (&counter{}).deliver)
	deadline := time.Now().Add(5 * time.Second)
	for !s.recorded.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // many backoffs of startRunner's
	if n := s.tries.Load(); n != 1 || !s.recorded.Load() {
		t.Errorf("the gone effect's record was tried %d times, and the next effect recorded: %v; want once, and true", n, s.recorded.Load())
	}
}
