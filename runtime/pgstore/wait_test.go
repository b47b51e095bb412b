package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// A claim waiting for a pooled connection stops waiting when its wait
// context ends (its client hung up), with idemstore.ErrWaitEnded, and
// leaves the key free: plain and transactional alike.
func TestClaimStopsWaitingForAConnectionWhenItsWaitEnds(t *testing.T) {
	const patience, promptly = 100 * time.Millisecond, 300 * time.Millisecond
	ctx := context.Background()
	s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	claim := func(key string) idemstore.Claim {
		return idemstore.Claim{
			Identity:      idemstore.Identity{Tenant: "t", Scope: "op", Key: key},
			Operation:     "op",
			Fingerprint:   []byte{1},
			Token:         "tok-" + key,
			Lease:         time.Minute,
			TTL:           time.Hour,
			OnLeaseExpiry: idemstore.Takeover,
		}
	}
	claims := map[string]func(ctx context.Context, c idemstore.Claim) error{
		"Claim": func(ctx context.Context, c idemstore.Claim) error {
			_, err := s.Claim(ctx, c)
			return err
		},
		"ClaimTx": func(ctx context.Context, c idemstore.Claim) error {
			_, tx, err := s.ClaimTx(ctx, c)
			if tx != nil {
				_ = tx.Rollback(context.Background())
			}
			return err
		},
	}
	for name, claimWith := range claims {
		held, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wait, cancel := context.WithTimeout(ctx, patience)
		began := time.Now()
		// The store context, bounded as the engine's is (StoreTimeout).
		storeCtx, stop := context.WithTimeout(ctx, 3*time.Second)
		err = claimWith(idemstore.WithWait(storeCtx, wait), claim(name))
		stop()
		took := time.Since(began)
		cancel()
		held.Release()
		if !errors.Is(err, idemstore.ErrWaitEnded) {
			t.Errorf("%s waiting for the pool's only connection, its wait ended: %v, want idemstore.ErrWaitEnded", name, err)
		}
		if took > patience+promptly {
			t.Errorf("%s returned after %v, want within %v of its wait's end", name, took.Round(time.Millisecond), promptly)
		}
		if res, err := s.Claim(ctx, claim(name)); err != nil || !res.Won {
			t.Errorf("%s: the retry's claim = won %v, %v; want won", name, res.Won, err)
		}
	}
}
