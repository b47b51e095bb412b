package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// TestModel drives the store, plain and transactional claims, through
// random sequences against the model of the store contract, on a clock the
// test sets. The handler transaction's own deadline runs on real time; a
// step ends its transaction long before the shortest lease (1s).
func TestModel(t *testing.T) {
	opts := storetest.ModelOptions{Runs: 3, Steps: 2000, ShrinkFor: 15 * time.Second}
	storetest.RunModel(t, opts, func(t *testing.T) storetest.ModelTarget {
		clock := &storetest.Clock{}
		s := openStore(t, sqlitestore.WithClock(clock.Now))
		return storetest.ModelTarget{
			Store:    s,
			SetClock: clock.Set,
			Tx: &storetest.ModelTx{
				Store:  s,
				Claims: storetest.TxClaimCommitted,
				Crash:  crashTx,
			},
		}
	})
}

// crashTx ends a handler's transaction as the death of its process would.
func crashTx(_ context.Context, tx idem.Tx) error { return sqlitestore.CrashTx(tx) }
