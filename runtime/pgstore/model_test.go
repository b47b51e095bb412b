package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/model"
)

// TestModel drives the store, plain and transactional claims, through
// random sequences against the model of the store contract.
//
// pgstore measures leases and expiry with the database's clock_timestamp()
// and takes no clock option. The test gives it a clock without touching the
// store: its schema holds a function clock_timestamp() that reads the time
// from a one-row table, and the pool's search_path names that schema before
// pg_catalog, so the store's statements and functions call it instead of
// the built-in one. The handler transaction's timeouts
// (idle_in_transaction_session_timeout, statement_timeout) stay on real
// time; a step ends its transaction long before the shortest lease (1s).
func TestModel(t *testing.T) {
	testURL(t)
	model.Run(t, model.Options{Runs: 4, Steps: 1500, ShrinkFor: 20 * time.Second}, target())
}

// openOnClock opens a store whose clock_timestamp() reads the time from a
// one-row table that SetClock writes.
func openOnClock(t *testing.T, tweak ...func(*pgxpool.Config)) storetest.Instance {
	ctx := context.Background()
	schema := newSchema(t)
	admin := openPool(t, schema)
	if _, err := admin.Exec(ctx, `CREATE TABLE model_clock (t timestamptz NOT NULL);
INSERT INTO model_clock VALUES ('-infinity');
CREATE FUNCTION clock_timestamp() RETURNS timestamptz
    LANGUAGE sql VOLATILE AS 'SELECT t FROM `+schema+`.model_clock'`); err != nil {
		t.Fatalf("create the test clock: %v", err)
	}
	pool := openPool(t, schema, append(slices.Clip(tweak), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = schema + ", pg_catalog"
	})...)
	s := pgstore.New(pool)
	in := instance(s, pool)
	in.SetClock = func(ctx context.Context, now time.Time) error {
		_, err := admin.Exec(ctx, `UPDATE model_clock SET t = $1`, now)
		return err
	}
	in.Crash = func(ctx context.Context, tx idemstore.Tx) error { return crashTx(ctx, admin, tx) }
	return in
}

// crashTx ends a handler's transaction as the death of its process would:
// its connection is terminated, and PostgreSQL aborts the transaction. The
// pool gets its connection back (closed) through Release, which can change
// nothing in the database any more.
func crashTx(ctx context.Context, admin *pgxpool.Pool, tx idemstore.Tx) error {
	ptx, ok := tx.Driver().(pgx.Tx)
	if !ok {
		return fmt.Errorf("Driver() is %T, want pgx.Tx", tx.Driver())
	}
	// The handler's pgx.Tx hides its connection (Conn is nil), so ask the
	// backend for its process id through the transaction itself.
	var pid int32
	if err := ptx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return fmt.Errorf("backend pid: %w", err)
	}
	var done bool
	// With a timeout, pg_terminate_backend waits until the backend is gone,
	// and its transaction's locks with it.
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&done); err != nil {
		return fmt.Errorf("terminate backend %d: %w", pid, err)
	}
	if !done {
		return fmt.Errorf("backend %d did not end within 5s", pid)
	}
	_ = tx.Rollback(ctx) // fails: the connection is gone
	return nil
}
