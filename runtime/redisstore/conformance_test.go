package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// The shared conformance suite, on Redis's own clock, against a single
// node and a cluster.
func TestConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		storetest.Run(t, func(t *testing.T) idem.Store { return storeOn(t, c) })
	})
}

// TestModel drives the store through random sequences against the model of
// the store contract, on a clock the test sets.
func TestModel(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		opts := storetest.ModelOptions{Runs: 4, Steps: 2000, ShrinkFor: 20 * time.Second}
		storetest.RunModel(t, opts, func(t *testing.T) storetest.ModelTarget {
			clock := &storetest.Clock{}
			return storetest.ModelTarget{
				Store: storeOn(t, c, redisstore.WithClock(clock.Now)),
				SetClock: func(ctx context.Context, now time.Time) error {
					return clock.Set(ctx, now)
				},
			}
		})
	})
}
