package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// commitTimeWipes are handlers whose work runs at their transaction's
// COMMIT and deletes another tenant's completed key there.
var commitTimeWipes = map[string][]string{
	// A deferred constraint trigger on a table of the handler's own
	// (none of the store's) fires at COMMIT.
	"deferred constraint trigger on the handler's table": {
		`CREATE FUNCTION {schema}.wipe_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.idempotency_keys WHERE tenant = 'globex';
    RETURN NULL;
END
$$`,
		`CREATE CONSTRAINT TRIGGER wipe AFTER INSERT ON {schema}.effects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.wipe_trigger()`,
		`INSERT INTO {schema}.effects (marker) VALUES ('acme')`,
	},
	// PostgreSQL runs the query of a cursor WITH HOLD to its end as the
	// transaction commits.
	"cursor WITH HOLD": {
		wipeFunc,
		`DECLARE later CURSOR WITH HOLD FOR SELECT {schema}.wipe()`,
	},
	// The deferred trigger, fired before the end's check as every
	// pending one is, defers itself anew and queues another event, which
	// fires at COMMIT.
	"trigger that defers itself again": {
		`CREATE FUNCTION {schema}.defer_again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.marker = 'acme' THEN
        SET CONSTRAINTS ALL DEFERRED;
        INSERT INTO {schema}.effects (marker) VALUES ('acme-again');
    ELSE
        DELETE FROM {schema}.idempotency_keys WHERE tenant = 'globex';
    END IF;
    RETURN NULL;
END
$$`,
		`CREATE CONSTRAINT TRIGGER wipe AFTER INSERT ON {schema}.effects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.defer_again()`,
		`INSERT INTO {schema}.effects (marker) VALUES ('acme')`,
	},
	// The deferred trigger, fired before the end's check, declares a
	// cursor WITH HOLD after the cursors were closed.
	"trigger that declares a cursor WITH HOLD": {
		wipeFunc,
		`CREATE FUNCTION {schema}.declare_later() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'DECLARE later CURSOR WITH HOLD FOR SELECT {schema}.wipe()';
    RETURN NULL;
END
$$`,
		`CREATE CONSTRAINT TRIGGER later AFTER INSERT ON {schema}.effects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.declare_later()`,
		`INSERT INTO {schema}.effects (marker) VALUES ('acme')`,
	},
}

// wipeFunc deletes globex's keys.
const wipeFunc = `CREATE FUNCTION {schema}.wipe() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.idempotency_keys WHERE tenant = 'globex';
    RETURN 1;
END
$$`

// The end of a handler's transaction counts what the transaction wrote to
// the store's tables, and looks for triggers, rules and policies on them,
// before its COMMIT (docs/semantics.md §7.2). Some of a transaction's work
// runs at its COMMIT, after every check: a deferred constraint trigger on
// a table of the handler's own (none of the store's), and the query of a
// cursor WITH HOLD, which PostgreSQL runs to its end as the transaction
// commits; a deferred trigger fired early can defer an event anew, or
// declare such a cursor. Any of them deletes another tenant's completed
// key there, the request commits, and that tenant's retry runs its
// handler again. Neither a keyed transaction nor a keyless one may commit
// such a write.
func TestAHandlersCommitTimeWriteDeletesAnotherTenantsKey(t *testing.T) {
	for name, stmts := range commitTimeWipes {
		for _, keyless := range []bool{false, true} {
			sub := name
			if keyless {
				sub += ", keyless"
			}
			t.Run(sub, func(t *testing.T) {
				r, s, globex := globexCharged(t)
				var acme error
				if keyless {
					acme = r.keylessCommits(t, s, stmts...)
				} else {
					acme = r.handlerCommits(t, s, stmts...)
				}
				r.wantReplayOn(t, s, globex, "globex-charge", acme)
			})
		}
	}
}

// globexCharged is a store on a role of its own, with globex's request
// (claim globex), whose handler wrote globex-charge, completed.
func globexCharged(t *testing.T) (r *roleStore, s *pgstore.Store, globex idemstore.Claim) {
	t.Helper()
	r = newRoleStore(t, "{schema}")
	s = pgstore.New(r.pool())
	globex = tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, r.replace(`INSERT INTO {schema}.effects (marker) VALUES ('globex-charge')`)) {
		t.Fatal("globex's first claim lost")
	}
	return r, s, globex
}

// keylessCommits runs stmts as the handler of a keyless transaction on s
// (Begin) and returns what its Commit returned.
func (r *roleStore) keylessCommits(t *testing.T, s *pgstore.Store, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	steps := handlerSteps{h: tx.Driver().(pgx.Tx)}
	for _, q := range stmts {
		q = r.replace(q)
		if err := steps.exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	err = tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("the keyless Commit: %v", err)
	return err
}

// What PostgreSQL defers to a transaction's COMMIT on the application's
// own tables still works in a handler's transaction: the deferred check
// of a foreign key fires before the end's check, where it passes when the
// row it needs was written after the one that needs it, and fails the
// commit, which writes nothing, when that row never was.
func TestAHandlersDeferredForeignKeyStillChecked(t *testing.T) {
	ctx := context.Background()
	s, pool := newStore(t)
	for _, q := range []string{
		`CREATE TABLE orders (id int PRIMARY KEY)`,
		`CREATE TABLE lines (order_id int NOT NULL REFERENCES orders DEFERRABLE INITIALLY DEFERRED)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	run := func(key string, stmts ...string) error {
		tx := wonClaimTx(t, s, tenantClaim("acme", key, "tok-"+key))
		for _, q := range stmts {
			if _, err := tx.Driver().(pgx.Tx).Exec(ctx, q); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatalf("%s: %v", q, err)
			}
		}
		return tx.Commit(ctx, idemstore.Response{Status: 201})
	}
	if err := run("k1", `INSERT INTO lines VALUES (1)`, `INSERT INTO orders VALUES (1)`); err != nil {
		t.Errorf("a line written before its order, in one transaction: Commit = %v, want nil", err)
	}
	if err := run("k2", `INSERT INTO lines VALUES (2)`); err == nil {
		t.Error("a line without its order committed")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM lines`).Scan(&n); err != nil || n != 1 {
		t.Errorf("lines = %d, %v; want the first request's one", n, err)
	}
}
