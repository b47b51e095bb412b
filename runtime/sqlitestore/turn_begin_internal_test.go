package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// A BeginTurn transaction keeps the write turn from its beginning to its
// end, and every way it ends passes the turn on exactly once: committed,
// rolled back, twice, after its lease, crashed, never ended (the lease
// passes it). Two writers queued behind it are admitted one at a time,
// and afterwards the turn is free and a new key's claim wins.
func TestBeginTurnPassesTheTurnOnce(t *testing.T) {
	ctx := context.Background()
	paths := map[string]struct {
		lease time.Duration
		end   func(t *testing.T, tx idemstore.Tx)
	}{
		"commit after a write": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if _, err := tx.Driver().(*Tx).ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('x')`); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx, idemstore.Response{}); err != nil {
				t.Errorf("Commit: %v", err)
			}
		}},
		"rollback twice": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			_ = tx.Rollback(ctx)
			_ = tx.Rollback(ctx)
		}},
		"commit after the lease": {300 * time.Millisecond, func(t *testing.T, tx idemstore.Tx) {
			time.Sleep(600 * time.Millisecond)
			_ = tx.Commit(ctx, idemstore.Response{})
		}},
		"crash": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := CrashTx(tx); err != nil {
				t.Errorf("CrashTx: %v", err)
			}
		}},
		"never ended": {300 * time.Millisecond, func(*testing.T, idemstore.Tx) {}},
	}
	for name, p := range paths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := turnStore(t)
			tx, err := s.BeginTurn(ctx, p.lease)
			if err != nil {
				t.Fatal(err)
			}
			if held, _ := turnState(s); !held {
				t.Fatal("a BeginTurn transaction does not hold the turn")
			}
			passedOnce(t, s, false, name, func() { p.end(t, tx) })
		})
	}
}

// BeginTurn waits for the turn for as long as its context allows, past
// the claims' lock wait, and leaves the queue when the context ends.
func TestBeginTurnWaitsUntilItsContextEnds(t *testing.T) {
	s := turnStore(t, WithLockWait(50*time.Millisecond))
	give, err := s.writers.take(context.Background(), time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.BeginTurn(ctx, time.Minute); err == nil || time.Since(start) < 250*time.Millisecond {
		t.Errorf("BeginTurn behind a held turn = %v after %v, want its context's end after 300ms", err, time.Since(start))
	}
	if _, waiting := turnState(s); waiting != 0 {
		t.Errorf("%d writers still queued after BeginTurn's context ended", waiting)
	}
	done := make(chan error, 1)
	go func() {
		tx, err := s.BeginTurn(context.Background(), time.Minute)
		if err == nil {
			err = tx.Rollback(context.Background())
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	give()
	if err := <-done; err != nil {
		t.Errorf("BeginTurn once the turn was given: %v", err)
	}
	turnIdle(t, s, "BeginTurn")
}
