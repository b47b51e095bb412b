package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// The suites run in both query execution modes pgstore supports: pgx's
// default and cache_describe, the one for PgBouncer in transaction mode.
var execModes = []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe}

func withExecMode(mode pgx.QueryExecMode) func(*pgxpool.Config) {
	return func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode }
}

func TestConformance(t *testing.T) {
	testURL(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) idem.Store {
				s, _ := newStore(t, withExecMode(mode))
				return s
			})
		})
	}
}

func TestConformanceTx(t *testing.T) {
	testURL(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			storetest.RunTx(t, func(t *testing.T) storetest.TxStore {
				s, pool := newStore(t, withExecMode(mode))
				return storetest.TxStore{
					Store: s,
					Write: writeEffect,
					Exec: func(ctx context.Context, driver any, sql string) error {
						_, err := driver.(pgx.Tx).Exec(ctx, sql)
						return err
					},
					Count: func(ctx context.Context, marker string) (int, error) {
						return countEffects(ctx, pool, marker)
					},
				}
			})
		})
	}
}

// writeEffect is a handler's business write through the transaction the
// store hands it.
func writeEffect(ctx context.Context, driver any, marker string) error {
	tx, ok := driver.(pgx.Tx)
	if !ok {
		return fmt.Errorf("Driver() is a %T, want pgx.Tx", driver)
	}
	_, err := tx.Exec(ctx, "INSERT INTO effects (marker) VALUES ($1)", marker)
	return err
}

func countEffects(ctx context.Context, pool *pgxpool.Pool, marker string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, "SELECT count(*) FROM effects WHERE marker = $1", marker).Scan(&n)
	return n, err
}
