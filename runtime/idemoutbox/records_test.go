package idemoutbox

import (
	"context"
	"errors"
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
