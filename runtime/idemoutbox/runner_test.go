package idemoutbox

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// blockingStore is a Store whose claims wait for their context to end.
type blockingStore struct {
	Store
	claiming chan struct{}
}

func (s blockingStore) Claim(ctx context.Context, _ int, _ time.Duration, _ string) ([]Message, error) {
	s.claiming <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (blockingStore) Prune(context.Context, time.Duration, int) (int, error) { return 0, nil }

// A claim cut short by the runner's own shutdown is no failure to log.
func TestShutdownLogsNoClaimFailure(t *testing.T) {
	var logs bytes.Buffer
	s := blockingStore{claiming: make(chan struct{}, 1)}
	r, err := NewRunner(Config{Store: s, Deliver: func(context.Context, Message) error { return nil },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	<-s.claiming
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if logs.Len() != 0 {
		t.Errorf("a shutdown logged:\n%s", logs.String())
	}
}

// Each wait is the doubled backoff, capped, less at most half of it.
func TestBackoffJitterBounds(t *testing.T) {
	r, err := NewRunner(Config{Store: blockingStore{}, Deliver: func(context.Context, Message) error { return nil },
		Backoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for n, full := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		full *= time.Millisecond
		seen := map[time.Duration]bool{}
		for range 200 {
			d := r.backoff(n + 1)
			if d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n+1, d, full/2, full)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Errorf("backoff(%d) took %d values in 200 draws: no jitter", n+1, len(seen))
		}
	}
}

// hangingStore claims one batch of n effects, and then, as a database
// that stopped answering, holds every write until its context ends.
type hangingStore struct {
	Store
	n        int
	claimed  atomic.Bool
	claiming chan struct{}
	releases atomic.Int32
}

func (s *hangingStore) Claim(ctx context.Context, _ int, _ time.Duration, _ string) ([]Message, error) {
	if s.claimed.Swap(true) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	msgs := make([]Message, s.n)
	for i := range msgs {
		msgs[i] = Message{ID: int64(i + 1), Name: "receipt", EffectKey: "ek", Attempts: 1}
	}
	close(s.claiming)
	return msgs, nil
}

func (s *hangingStore) Release(ctx context.Context, _ Message, _ string) error {
	s.releases.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (*hangingStore) Failed(ctx context.Context, _ Message, _, _ string, _ time.Duration, _ bool) error {
	<-ctx.Done()
	return ctx.Err()
}

func (*hangingStore) Prune(context.Context, time.Duration, int) (int, error) { return 0, nil }

// A runner stopped while its one worker is busy and the database has
// stopped answering gives back the rest of its batch within the bound
// of the whole shutdown: Run returns at most Drain plus 5 s after its
// context ends, however many effects it has to give back.
func TestShutdownBoundWithTheDatabaseHung(t *testing.T) {
	s := &hangingStore{n: 4, claiming: make(chan struct{})}
	r, err := NewRunner(Config{Store: s, Batch: 4, Workers: 1, Drain: 100 * time.Millisecond, Poll: time.Millisecond,
		Deliver: func(ctx context.Context, _ Message) error {
			<-ctx.Done()
			return ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		_ = r.Run(ctx)
		close(done)
	}()
	<-s.claiming
	time.Sleep(50 * time.Millisecond)
	stopped := time.Now()
	cancel()
	bound := r.cfg.Drain + recordTimeout
	select {
	case <-done:
	case <-time.After(bound + 500*time.Millisecond):
		<-done
		t.Errorf("Run returned %v after its context ended, giving back %d effects; want at most Drain + 5 s = %v",
			time.Since(stopped).Round(time.Millisecond), s.releases.Load(), bound)
	}
	if n := s.releases.Load(); n != 3 {
		t.Errorf("%d effects given back, want the 3 that waited for a worker", n)
	}
}
