package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
			storetest.Run(t, target(withExecMode(mode)))
		})
	}
}

func TestConformanceTx(t *testing.T) {
	testURL(t)
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			storetest.RunTx(t, target(withExecMode(mode)))
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

// sessionStates is what a handler could leave on a PostgreSQL session.
var sessionStates = []storetest.SessionState{
	// Every probe answers without failing, on a fresh session too: a
	// failed statement would cost the probing request its connection
	// (see pgstore's Release), and the next one would meet a new session.
	sessionState("temp table", `SELECT coalesce(to_regclass('pg_temp.leak')::text, 'none')`,
		`CREATE TEMP TABLE leak AS SELECT 'tenant-a secret'::text AS secret`),
	sessionState("setting", `SELECT current_setting('work_mem')`, `SET work_mem = '1234kB'`),
	sessionState("tenant setting", `SELECT coalesce(current_setting('app.tenant', true), '')`,
		`SELECT set_config('app.tenant', 'tenant-a', false)`),
	sessionState("prepared statement", `SELECT count(*)::text FROM pg_prepared_statements WHERE name = 'leak'`,
		`PREPARE leak AS SELECT 'tenant-a secret'::text`),
	{
		Name: "statement prepared through pgx",
		Leave: func(ctx context.Context, tx any) error {
			_, err := tx.(pgx.Tx).Prepare(ctx, "leak_named", `SELECT 'tenant-a secret'::text`)
			return err
		},
		Probe: func(ctx context.Context, tx any) (string, error) {
			var v string
			err := tx.(pgx.Tx).QueryRow(ctx, `SELECT count(*)::text FROM pg_prepared_statements WHERE name = 'leak_named'`).Scan(&v)
			return v, err
		},
	},
	sessionState("cursor WITH HOLD", `SELECT count(*)::text FROM pg_cursors WHERE name = 'leak_cursor'`,
		`DECLARE leak_cursor CURSOR WITH HOLD FOR SELECT 'tenant-a secret'::text`),
	// Not a table: a check of the session that looked at pg_class alone
	// would miss it.
	sessionState("temporary function", `SELECT count(*)::text FROM pg_proc WHERE proname = 'leak' AND pronamespace = pg_my_temp_schema()`,
		`CREATE FUNCTION pg_temp.leak() RETURNS text LANGUAGE sql AS $$SELECT 'tenant-a secret'$$`),
	{
		// currval fails on a session that has not used the sequence, so
		// the probe reads it in a savepoint of its own.
		Name: "sequence's currval",
		Leave: func(ctx context.Context, tx any) error {
			_, err := tx.(pgx.Tx).Exec(ctx, `CREATE SEQUENCE IF NOT EXISTS leak_seq; SELECT nextval('leak_seq')`)
			return err
		},
		Probe: func(ctx context.Context, tx any) (string, error) {
			sp, err := tx.(pgx.Tx).Begin(ctx)
			if err != nil {
				return "", err
			}
			var v string
			if err := sp.QueryRow(ctx, `SELECT currval('leak_seq')::text`).Scan(&v); err != nil {
				return "none", sp.Rollback(ctx)
			}
			return v, sp.Commit(ctx)
		},
	},
	sessionState("session advisory lock", `SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objid = 4242`,
		`SELECT pg_advisory_lock(4242)`),
	// Another role for the rest of the session, and the privileges that
	// come with it. The role is a superuser's, so that the store's own
	// statements after it still run.
	sessionState("session authorization", `SELECT session_user::text`,
		`DO $$BEGIN CREATE ROLE `+sessionLeakRole+` SUPERUSER NOLOGIN;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END$$`,
		`SET SESSION AUTHORIZATION `+sessionLeakRole),
	// A channel listened to, whose notifications, another tenant's too,
	// reach the session. LISTEN takes hold when its transaction commits,
	// so the handler's own probe cannot see it (AtCommit).
	func() storetest.SessionState {
		st := sessionState("channel listened to", `SELECT count(*)::text FROM pg_listening_channels() c WHERE c = 'idemgen_leak'`,
			`LISTEN idemgen_leak`)
		st.AtCommit = true
		return st
	}(),
}

// sessionState is a storetest.SessionState that leaves stmts and reads the
// first column of probe's first row, as text.
func sessionState(name, probe string, stmts ...string) storetest.SessionState {
	return storetest.SessionState{
		Name: name,
		Leave: func(ctx context.Context, tx any) error {
			for _, q := range stmts {
				if _, err := tx.(pgx.Tx).Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		},
		Probe: func(ctx context.Context, tx any) (string, error) {
			var v string
			err := tx.(pgx.Tx).QueryRow(ctx, probe).Scan(&v)
			return v, err
		},
	}
}
