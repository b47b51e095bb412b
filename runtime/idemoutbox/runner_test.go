package idemoutbox

import (
	"bytes"
	"context"
	"log/slog"
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
