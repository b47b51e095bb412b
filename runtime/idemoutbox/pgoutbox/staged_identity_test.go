package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A staged effect carries the stored identity of the request that staged
// it (docs/semantics.md §8.3), and a runner delivers it as that tenant's.
// The end of a handler's transaction lets every insert into the outbox
// stand (docs/semantics.md §7.2: "staging one is an insert"), whatever
// identity it writes:
// acme's handler inserts an effect under globex's tenant and completed
// key, its request commits, and a runner hands the receiver an effect of
// globex's that no request of globex's staged.
func TestAHandlersInsertStagesAnotherTenantsEffect(t *testing.T) {
	ctx := context.Background()
	pool, schema := rolePool(t)
	acme := acmeCommits(t, pool, `INSERT INTO `+schema+`.idempotency_outbox (tenant, scope, key, effect_key, name, payload)
VALUES ('globex', '', 'v1', 'forged-effect', 'refund', '\x00')`)
	ob := newOutbox(pool)
	due, err := ob.Claim(ctx, 10, time.Minute, "runner")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range due {
		if m.Tenant != "acme" {
			t.Errorf("a runner delivers effect %q (%s) as tenant %s's, key %q, which no request of that tenant staged: acme's request inserted it and committed (%v)",
				m.EffectKey, m.Name, m.Tenant, m.Key, acme)
		}
	}
}

// The outbox rows a transaction commits are the ones StageEffect (Stage)
// inserted under its request's identity, counted whatever became of
// them: one staged in a savepoint that rolled back leaves nothing to
// count against, but a row the handler inserted itself, under any
// identity, in a savepoint released or rolled back too, fails the end's
// check and the key closed, and a keyless transaction stages nothing.
func TestOutboxRowsAreThoseTheTransactionStaged(t *testing.T) {
	ctx := context.Background()
	pool, schema := rolePool(t)
	table := pgx.Identifier{schema, "idempotency_outbox"}
	store := pgstore.New(pool)
	insert := func(tenant, key, effect string) string {
		return `INSERT INTO ` + table.Sanitize() + ` (tenant, scope, key, effect_key, name, payload)
VALUES ('` + tenant + `', 'createOrder', '` + key + `', '` + effect + `', 'receipt', '\x00')`
	}
	type step func(t *testing.T, tx pgx.Tx, id idemstore.Identity)
	stage := func(effect string) step {
		return func(t *testing.T, tx pgx.Tx, id idemstore.Identity) {
			if ok, err := pgstore.StageEffect(ctx, tx, table, id, id.Key+"-"+effect, "receipt", []byte("x")); !ok || err != nil {
				t.Fatalf("StageEffect(%s) = %v, %v", effect, ok, err)
			}
		}
	}
	exec := func(sql func(id idemstore.Identity) string) step {
		return func(t *testing.T, tx pgx.Tx, id idemstore.Identity) {
			if _, err := tx.Exec(ctx, sql(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	savepoint := func(release bool, steps ...step) step {
		return func(t *testing.T, tx pgx.Tx, id idemstore.Identity) {
			sp, err := tx.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range steps {
				s(t, sp, id)
			}
			end := sp.Rollback
			if release {
				end = sp.Commit
			}
			if err := end(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	forged := exec(func(idemstore.Identity) string { return insert("globex", "v1", "forged") })
	own := exec(func(id idemstore.Identity) string { return insert(id.Tenant, id.Key, id.Key+"-by-hand") })
	for i, c := range []struct {
		name    string
		steps   []step
		commits bool
		rows    int
	}{
		{"staged", []step{stage("e1"), stage("e2")}, true, 2},
		{"staged in a savepoint rolled back, then again", []step{savepoint(false, stage("e1")), stage("e1")}, true, 1},
		{"staged in a savepoint released", []step{savepoint(true, stage("e1"))}, true, 1},
		{"another tenant's inserted", []step{stage("e1"), forged}, false, 0},
		{"another tenant's inserted in a savepoint released", []step{savepoint(true, forged)}, false, 0},
		{"another tenant's inserted in a savepoint rolled back", []step{savepoint(false, forged), stage("e1")}, false, 0},
		{"its own identity's inserted by hand", []step{own}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: fmt.Sprintf("k%d", i)}
			claim := idemstore.Claim{Identity: id, Operation: "createOrder", Fingerprint: make([]byte, 32), Token: fmt.Sprintf("tok-%d", i),
				Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover}
			res, tx, err := store.ClaimTx(ctx, claim)
			if err != nil || !res.Won {
				t.Fatalf("claim = %+v, %v", res, err)
			}
			// A step that fails leaves the transaction to this.
			defer func() { _ = tx.Rollback(ctx) }()
			for _, s := range c.steps {
				s(t, tx.Driver().(pgx.Tx), id)
			}
			err = tx.Commit(ctx, idemstore.Response{Status: 201})
			if c.commits != (err == nil) || (err != nil && !errors.Is(err, idemstore.ErrOutcomeUnknown)) {
				t.Errorf("Commit = %v; want it to commit: %v", err, c.commits)
			}
			var rows, others int
			if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE key = $1), count(*) FILTER (WHERE tenant <> 'acme') FROM idempotency_outbox`,
				id.Key).Scan(&rows, &others); err != nil {
				t.Fatal(err)
			}
			if rows != c.rows || others != 0 {
				t.Errorf("the outbox holds %d rows of the request, want %d, and %d of another tenant", rows, c.rows, others)
			}
		})
	}

	t.Run("keyless", func(t *testing.T) {
		tx, err := store.Begin(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		ptx := tx.Driver().(pgx.Tx)
		id := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: "k-none"}
		if ok, err := pgstore.StageEffect(ctx, ptx, table, id, "e1", "receipt", nil); ok || !errors.Is(err, pgstore.ErrNoStaging) {
			t.Errorf("StageEffect in a keyless transaction = %v, %v; want ErrNoStaging", ok, err)
		}
		if _, err := ptx.Exec(ctx, insert("acme", "k-none", "e1")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
			t.Error("a keyless transaction that inserted an outbox row committed")
		}
	})

	t.Run("another identity", func(t *testing.T) {
		claim := idemstore.Claim{Identity: idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: "k-id"}, Operation: "createOrder",
			Fingerprint: make([]byte, 32), Token: "tok-id", Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover}
		res, tx, err := store.ClaimTx(ctx, claim)
		if err != nil || !res.Won {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		globex := idemstore.Identity{Tenant: "globex", Key: "v1"}
		if ok, err := pgstore.StageEffect(ctx, tx.Driver().(pgx.Tx), table, globex, "e1", "receipt", nil); ok || !errors.Is(err, pgstore.ErrNoStaging) {
			t.Errorf("StageEffect under another identity = %v, %v; want ErrNoStaging", ok, err)
		}
	})
}
