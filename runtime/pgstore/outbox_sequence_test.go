package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler's transaction that altered the store's tables is not
// committed (docs/semantics.md §7.2), so that nothing a handler does there
// reaches another request. But the outbox's id is drawn from its identity
// sequence, and setval, like nextval, is not transactional: PostgreSQL
// keeps it when the transaction that ran it rolls back, and no check of a
// transaction's end can undo it. acme's handler, whose role ran the
// migration and so owns the sequence (UPDATE on it is enough), sets it
// back to 1 and fails; its request is rolled back, but every effect staged
// afterwards, by any tenant, is given an id that a row already has, until
// the sequence has gone past every row (set to its largest value, for
// good). What holds is that this is all it does (docs/semantics.md §8.3):
// staging fails, so the request that stages fails and commits nothing,
// and no effect is lost, forged or moved to another identity; a late
// record of a delivery cannot reach an effect that took a reused id
// (TestALateDeliveryRecordMarksOnlyItsOwnEffect). The privileges
// docs/effects.md recommends keep setval from the handler's role.
func TestAHandlersSetvalOnTheOutboxSequenceOnlyFailsStaging(t *testing.T) {
	ctx := context.Background()
	r, _, table, s := newOutboxRole(t)
	stage := func(c idemstore.Claim, effectKey string) error { return stageReceipt(t, s, table, c, effectKey) }

	// globex's first request stages its effect, the outbox's first row.
	if err := stage(tenantClaim("globex", "v1", "tok-v1"), "v1-receipt"); err != nil {
		t.Fatalf("globex's first request: %v", err)
	}

	// acme's handler sets the outbox's sequence back, and fails: its
	// request is rolled back.
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, `SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence($1, 'id'), 1, false)`,
		table.Sanitize()); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// globex's next request cannot stage its effect, and fails whole.
	if err := stage(tenantClaim("globex", "v2", "tok-v2"), "v2-receipt"); err == nil {
		t.Logf("globex's request staged its effect after acme's rolled-back request set the outbox's sequence back")
	}
	rows, err := r.admin.Query(ctx, `SELECT id, key, effect_key, state FROM `+table.Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		id                    int64
		key, effectKey, state string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.key, &x.effectKey, &x.state)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range got {
		if x.key+"-receipt" != x.effectKey || x.state != "pending" {
			t.Errorf("outbox row %d is %s's %s, %s: an effect moved or changed", x.id, x.key, x.effectKey, x.state)
		}
	}
	if len(got) == 0 || got[0].key != "v1" {
		t.Errorf("globex's first effect is gone: the outbox holds %v", got)
	}
}

// The same setval must not lose another tenant's effect. The outbox
// records a delivery whoever holds the row (deliveredSQL), and a row's id
// is unique only as long as the sequence never goes back, so the record
// is fenced on the row's identity too, not on its id alone. A
// runner whose lease ran out while it delivered globex's effect records
// the delivery late, after another runner delivered the effect again,
// recorded it, and pruned the row (the one kind of duplicate the outbox
// allows, docs/semantics.md §8.3). In between acme's handler set the
// sequence back, in a request that was rolled back, and initech's effect,
// staged next, took the pruned row's id: a record by id would mark
// initech's effect delivered, and no runner would ever send it.
func TestALateDeliveryRecordMarksOnlyItsOwnEffect(t *testing.T) {
	ctx := context.Background()
	r, pool, table, s := newOutboxRole(t)
	stage := func(c idemstore.Claim, effectKey string) {
		t.Helper()
		if err := stageReceipt(t, s, table, c, effectKey); err != nil {
			t.Fatalf("%s's request: %v", c.Tenant, err)
		}
	}
	ob := pgoutbox.New(pool, idemoutbox.Options{})

	stage(tenantClaim("globex", "v1", "tok-v1"), "v1-receipt")
	// Runner A claims globex's effect, and takes longer than its lease.
	a, err := ob.Claim(ctx, 10, 200*time.Millisecond, "runner-A")
	if err != nil || len(a) != 1 {
		t.Fatalf("runner A's claim = %v, %v", a, err)
	}
	time.Sleep(400 * time.Millisecond)
	// Runner B delivers it again, records it, and prunes it.
	b, err := ob.Claim(ctx, 10, time.Minute, "runner-B")
	if err != nil || len(b) != 1 {
		t.Fatalf("runner B's claim = %v, %v", b, err)
	}
	if _, err := ob.Delivered(ctx, b[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := ob.Prune(ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}

	// acme's handler sets the outbox's sequence back, and fails.
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, `SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence($1, 'id'), $2, false)`,
		table.Sanitize(), a[0].ID); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// initech stages an effect; then runner A records its late delivery.
	stage(tenantClaim("initech", "i1", "tok-i1"), "i1-receipt")
	if _, err := ob.Delivered(ctx, a[0]); err != nil {
		t.Logf("runner A's late record: %v", err)
	}
	var state string
	var id int64
	if err := r.admin.QueryRow(ctx, `SELECT id, state FROM `+table.Sanitize()+` WHERE tenant = 'initech'`).Scan(&id, &state); err != nil {
		t.Fatal(err)
	}
	if state != "pending" {
		t.Errorf("initech's effect (id %d), never handed to any runner, is %s: runner A's late record of globex's effect (id %d) "+
			"marked it so, after acme's rolled-back request set the outbox's sequence back", id, state, a[0].ID)
	}
}

// The transactional form of the same: a handler's request that altered
// the outbox's identity (ALTER TABLE ... ALTER COLUMN id RESTART, or
// ALTER SEQUENCE on the sequence behind it) is not committed
// (docs/semantics.md §7.2: "that truncated or altered one of them"), or
// every effect staged afterwards would be given an id a row already has.
// The change writes none of the outbox's own catalog rows, only the
// sequence's pg_class and pg_sequence rows, which the end's check
// watches as the outbox's.
func TestAHandlersRestartOfTheOutboxIdentityIsNotCommitted(t *testing.T) {
	cases := map[string]string{
		"ALTER TABLE ... RESTART": `ALTER TABLE {schema}.idempotency_outbox ALTER COLUMN id RESTART WITH 1`,
		"ALTER SEQUENCE":          `ALTER SEQUENCE {schema}.idempotency_outbox_id_seq RESTART WITH 1`,
	}
	for name, stmt := range cases {
		t.Run(name, func(t *testing.T) {
			r, _, table, s := newOutboxRole(t)
			stage := func(c idemstore.Claim, effectKey string) error { return stageReceipt(t, s, table, c, effectKey) }
			if err := stage(tenantClaim("globex", "v1", "tok-v1"), "v1-receipt"); err != nil {
				t.Fatalf("globex's first request: %v", err)
			}
			if acme := r.handlerCommits(t, s, stmt); acme == nil {
				t.Errorf("acme's request committed %s", r.replace(stmt))
			}
			if err := stage(tenantClaim("globex", "v2", "tok-v2"), "v2-receipt"); err != nil {
				t.Errorf("globex's request could not stage its effect after acme's request: %v", err)
			}
		})
	}
}

// stageReceipt runs c's request, won on s, whose handler stages a
// receipt under effectKey in the outbox table, and returns its Stage's
// or its Commit's error.
func stageReceipt(t *testing.T, s *pgstore.Store, table pgx.Identifier, c idemstore.Claim, effectKey string) error {
	t.Helper()
	ctx := context.Background()
	tx := wonClaimTx(t, s, c)
	if _, err := pgstore.StageEffect(ctx, tx.Driver().(pgx.Tx), table, c.Identity, effectKey, "receipt", []byte("x")); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx, idemstore.Response{Status: 201})
}

// newOutboxRole is newRoleStore's role with the outbox migrated: the
// role, its pool, the outbox's table and a store on a pool of its own.
func newOutboxRole(t *testing.T) (*roleStore, *pgxpool.Pool, pgx.Identifier, *pgstore.Store) {
	t.Helper()
	r := newRoleStore(t, "{schema}")
	pool := r.pool()
	if err := pgoutbox.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return r, pool, pgx.Identifier{r.schema, "idempotency_outbox"}, pgstore.New(r.pool())
}
