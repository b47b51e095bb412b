package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The end of a handler's transaction refuses an ALTER TABLE of the
// store's table by its change to the table's pg_class row. Dropping the
// primary key changes pg_constraint and drops the index, and leaves the
// table's pg_class row as it was: the transaction commits, and every
// later claim of every tenant fails, since idempotency_claim's INSERT ...
// ON CONFLICT (tenant, scope, key) has no unique index to infer.
func TestAHandlerDropsTheKeysPrimaryKeyAndCommits(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, `ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", mcommit)
	_, gtx, gerr := s.ClaimTx(ctx, tenantClaim("globex", "v1", "tok-globex"))
	if gtx != nil {
		_ = gtx.Rollback(ctx)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_index WHERE indrelid = 'idempotency_keys'::regclass AND indisunique`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if mcommit == nil && n == 0 {
		t.Fatalf("acme's request dropped the keys' primary key and committed; globex's next claim: %v", gerr)
	}
}

// The counts of the transaction's writes are PostgreSQL's statistics,
// which a session with track_counts off does not keep: a handler whose
// role may set it (a superuser, as applications often run in small
// deployments) turns it off for its transaction, deletes another tenant's
// completed key, and commits; that tenant's completed request runs again.
func TestAHandlerWithoutTrackCountsDeletesAnotherTenantsKey(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	var super bool
	if err := pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if !super {
		t.Skip("the test's role is not a superuser")
	}
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	for _, q := range []string{
		`SET LOCAL track_counts = off`,
		`DELETE FROM idempotency_keys WHERE tenant = 'globex'`,
	} {
		if _, err := tx.Driver().(pgx.Tx).Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})
	retry := globex
	retry.Token = "tok-globex-retry"
	won := runCharge(t, s, retry, `INSERT INTO effects (marker) VALUES ('globex-charge')`)
	if n, err := countEffects(ctx, pool, "globex-charge"); err != nil || n > 1 {
		t.Fatalf("globex's completed request ran again (%d charges, %v; retry won %v): acme's request deleted its key with track_counts off and committed (%v)", n, err, won, mcommit)
	}
}
