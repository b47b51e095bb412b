package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// rolePool returns a pool of a role that is not a superuser, which owns a
// schema of its own, named by its search_path, and has pgstore's and the
// outbox's tables migrated there; all of it is dropped when the test ends.
func rolePool(t *testing.T) (pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := context.Background()
	url := testURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "outboxtest_role_" + hex.EncodeToString(b)
	schema = "outboxtest_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`CREATE SCHEMA ` + schema + ` AUTHORIZATION ` + role,
		`ALTER ROLE ` + role + ` SET search_path = ` + schema,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{
			`SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE usename = '` + role + `'`,
			`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
			`DROP OWNED BY ` + role,
			`DROP ROLE ` + role,
		} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool, schema
}

// newOutbox returns the outbox on pool with the default options.
func newOutbox(pool *pgxpool.Pool) *pgoutbox.Outbox { return pgoutbox.New(pool, idemoutbox.Options{}) }

// acmeCommits runs stmts as the handler of acme's request, a won
// transactional claim on pool, and returns what its Commit returned.
func acmeCommits(t *testing.T, pool *pgxpool.Pool, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	claim := idemstore.Claim{Identity: idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: "m1"}, Operation: "createOrder",
		Fingerprint: make([]byte, 32), Token: "tok-acme", Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover}
	res, tx, err := pgstore.New(pool).ClaimTx(ctx, claim)
	if err != nil || !res.Won {
		t.Fatalf("acme's claim = %+v, %v", res, err)
	}
	for _, q := range stmts {
		if _, err := tx.Driver().(pgx.Tx).Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
	}
	err = tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", err)
	return err
}

// A handler's transaction that made, in any schema, a function named like
// one of the store's is not committed (docs/semantics.md §7.2): later
// sessions find such a function through their search_path, where one that
// fits the arguments better than pg_catalog's wins. The outbox's List
// calls cardinality on a text[] unqualified, and pg_catalog's cardinality
// takes anyarray: a cardinality(text[]) of the handler's, in the schema
// its role owns and its search_path names, fits exactly, is not among the
// names the end of the transaction looks for, and runs, outside every
// check, whenever an operator lists effects. Here it marks another
// tenant's pending effect delivered, which no runner then delivers.
func TestAHandlersCardinalityRunsInTheOperatorsList(t *testing.T) {
	ctx := context.Background()
	pool, schema := rolePool(t)
	// globex's committed request staged an effect, not delivered yet.
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload)
VALUES ('globex', '', 'v1', 'globex-effect', 'receipt', '\x00')`); err != nil {
		t.Fatal(err)
	}

	// acme's handler makes the function, and its request commits.
	acme := acmeCommits(t, pool, `CREATE FUNCTION `+schema+`.cardinality(a text[]) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    UPDATE `+schema+`.idempotency_outbox SET state = 'delivered', delivered_at = pg_catalog.clock_timestamp()
     WHERE tenant = 'globex' AND state = 'pending';
    RETURN pg_catalog.cardinality(a);
END
$$`)

	// An operator lists the outbox's dead effects; then a runner looks
	// for due ones.
	ob := newOutbox(pool)
	if _, err := ob.List(ctx, idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StateDead}}); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_outbox WHERE tenant = 'globex'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	due, err := ob.Claim(ctx, 10, time.Minute, "runner")
	if err != nil {
		t.Fatal(err)
	}
	if state != string(idemoutbox.StatePending) || len(due) == 0 {
		t.Errorf("another tenant's pending effect is %s and no runner can take it (%d due), though none delivered it: "+
			"acme's request made a cardinality(text[]) that the operator's List ran, and committed (%v)", state, len(due), acme)
	}
}
