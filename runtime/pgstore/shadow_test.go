package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler that makes the name idempotency_keys resolve to a relation of
// its own making, on its session, or that puts a trigger or a rule on the
// table (its role may own it), cannot have the statements that end its
// transaction write elsewhere or be undone (docs/semantics.md §7.2): its
// commit does not go through, its key is settled in the store's own
// table, and its retry never runs the handler's write a second time.
// The relation is a temporary table (the session's search_path finds those
// first) or a table in a schema of its own put on the search_path; made
// inside the transaction or, after the handler ended the transaction
// itself with a raw ROLLBACK, on the session, where settle's statements
// meet it.
func TestAShadowOfTheKeysTableAnswersForNoStatementOfTheStore(t *testing.T) {
	cases := map[string][]string{
		"temporary table": {
			`CREATE TEMP TABLE idempotency_keys AS SELECT * FROM idempotency_keys`,
		},
		"search_path for the transaction": {
			`CREATE SCHEMA {evil}`,
			`CREATE TABLE {evil}.idempotency_keys AS SELECT * FROM idempotency_keys`,
			`SET LOCAL search_path = {evil}, pg_catalog`,
		},
		"temporary table after a raw ROLLBACK": {
			`ROLLBACK`,
			`CREATE TEMP TABLE idempotency_keys (LIKE idempotency_keys INCLUDING ALL)`,
		},
		// An "=" for text that never holds and an idempotency_complete
		// that does not raise, in front of pg_catalog: the completion
		// would update nothing and not fail.
		"operators and the completion's function on the search_path": {
			`CREATE SCHEMA {evil}`,
			`CREATE FUNCTION {evil}.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false'`,
			`CREATE OPERATOR {evil}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {evil}.never)`,
			`CREATE FUNCTION {evil}.idempotency_complete(text, text, text, text, integer, bytea, bytea, boolean) RETURNS void LANGUAGE sql AS ''`,
			`SET LOCAL search_path = {evil}, pg_catalog, {schema}`,
		},
		"trigger":                {reopenKeyFunc, reopenKeyTrigger},
		"trigger in a savepoint": {`SAVEPOINT s`, reopenKeyFunc, reopenKeyTrigger, `RELEASE SAVEPOINT s`},
		"rule":                   {`CREATE RULE keep_open AS ON UPDATE TO idempotency_keys WHERE NEW.state = 'completed' DO INSTEAD NOTHING`},
		"search_path for the session after a raw ROLLBACK": {
			`ROLLBACK`,
			`CREATE SCHEMA {evil}`,
			`CREATE TABLE {evil}.idempotency_keys (LIKE idempotency_keys INCLUDING ALL)`,
			`SET search_path = {evil}, pg_catalog`,
		},
	}
	for name, stmts := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newStore(t)
			ctx := context.Background()
			evil := "idemtest_evil_" + randomHex(6)
			t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+evil+" CASCADE") })
			const lease = 2 * time.Second
			res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", lease))
			if err != nil || !res.Won {
				t.Fatalf("ClaimTx = %+v, %v", res, err)
			}
			h := pgstore.Unchecked(tx)
			var schema string
			if err := h.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
				t.Fatal(err)
			}
			for _, q := range append(stmts, `INSERT INTO {schema}.effects (marker) VALUES ('charge')`) {
				q = strings.NewReplacer("{evil}", evil, "{schema}", schema).Replace(q)
				if _, err := h.Exec(ctx, q); err != nil {
					_ = tx.Rollback(ctx)
					t.Fatalf("%s: %v", q, err)
				}
			}
			commitErr := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"ok":true}`)})
			var state string
			if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE key = 'k1'`).Scan(&state); err != nil && err != pgx.ErrNoRows {
				t.Fatal(err)
			}
			if commitErr == nil && state != string(idemstore.StateCompleted) {
				t.Errorf("Commit succeeded, yet the key's row is %q, not completed: the completion wrote elsewhere", state)
			}
			time.Sleep(lease + 300*time.Millisecond)
			res, tx2, err := s.ClaimTx(ctx, claimFor("k1", "tok2", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if res.Won {
				if _, err := tx2.Driver().(pgx.Tx).Exec(ctx, `INSERT INTO effects (marker) VALUES ('charge')`); err != nil {
					t.Fatal(err)
				}
				if err := tx2.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
					t.Fatal(err)
				}
			}
			n, err := countEffects(ctx, pool, "charge")
			if err != nil {
				t.Fatal(err)
			}
			if n > 1 {
				t.Fatalf("the handler's write committed %d times for one key (its Commit: %v; the key's row then %q; the retry after the lease won %v, took over %v)",
					n, commitErr, state, res.Won, res.TookOver)
			}
			if commitErr == nil && n != 1 {
				t.Fatalf("Commit succeeded, yet the handler's write committed %d times", n)
			}
		})
	}
}

// reopenKeyFunc and reopenKeyTrigger turn the key's completion back into
// an abandoned claim that a retry may take over at once.
const (
	reopenKeyFunc = `CREATE FUNCTION reopen_key() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    NEW.state := 'in_flight';
		    NEW.fail_closed := false;
		    NEW.lease_until := clock_timestamp() - interval '1 second';
		    NEW.status := NULL;
		    RETURN NEW;
		END $$`
	reopenKeyTrigger = `CREATE TRIGGER reopen_key BEFORE UPDATE ON idempotency_keys FOR EACH ROW
		WHEN (NEW.state = 'completed') EXECUTE FUNCTION reopen_key()`
)

// A trigger a keyless transaction's handler puts on the store's table
// would act on every key's completion after it, whoever's: the keyless
// transaction does not commit, and the trigger goes with it.
func TestAKeylessTransactionLeavesNoTriggerOnTheKeysTable(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{reopenKeyFunc, reopenKeyTrigger} {
		handlerExec(t, tx, q)
	}
	if err := tx.Commit(ctx, idemstore.Response{}); err == nil {
		t.Error("a keyless transaction that put a trigger on the store's table committed")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'idempotency_keys'::regclass AND NOT tgisinternal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d triggers on idempotency_keys after the keyless transaction", n)
	}
}
