package memstore_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// TestModel drives the store through random sequences against the model of
// the store contract, on a clock the test sets.
func TestModel(t *testing.T) {
	opts := storetest.ModelOptions{Runs: 8, Steps: 3000, ShrinkFor: 10 * time.Second}
	storetest.RunModel(t, opts, func(*testing.T) storetest.ModelTarget {
		clock := &storetest.Clock{}
		return storetest.ModelTarget{
			Store:    memstore.New(memstore.WithClock(clock.Now)),
			SetClock: clock.Set,
		}
	})
}
