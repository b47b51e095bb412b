package pgstore_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// target is the store to every suite of storetest: a fresh schema, with
// the key table and a table of business writes, on a pool that tweak
// adjusts; on the database's clock, or on the suite's (openOnClock).
func target(tweak ...func(*pgxpool.Config)) storetest.Target {
	return storetest.Target{
		Open: func(t *testing.T, clock *storetest.Clock) storetest.Instance {
			if clock != nil {
				return openOnClock(t, tweak...)
			}
			s, pool := newStore(t, tweak...)
			return instance(s, pool)
		},
		TxClaims: storetest.TxClaimInTx,
		Session:  sessionStates,
	}
}

// instance describes s, on pool, to the suites.
func instance(s *pgstore.Store, pool *pgxpool.Pool) storetest.Instance {
	return storetest.Instance{
		Store: s,
		Write: writeEffect,
		Exec: func(ctx context.Context, driver any, sql string) error {
			_, err := driver.(pgx.Tx).Exec(ctx, sql)
			return err
		},
		Count: func(ctx context.Context, marker string) (int, error) {
			return countEffects(ctx, pool, marker)
		},
		Dump: func(t *testing.T) []byte { return dumpKeys(t, pool) },
	}
}

// dumpKeys returns every column of every row of the key table.
func dumpKeys(t *testing.T, pool *pgxpool.Pool) []byte {
	// Every column of every row, as PostgreSQL prints it (bytea in
	// hex) and as its binary values.
	rows, err := pool.Query(context.Background(), `SELECT k::text, k.* FROM idempotency_keys k`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out bytes.Buffer
	for rows.Next() {
		for _, raw := range rows.RawValues() {
			out.Write(raw)
			out.WriteByte('\n')
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
