package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The end of a handler's transaction told the transaction pgstore began
// from one the handler began by its mark, idemgen.transaction, which the
// handler can read, and by PostgreSQL's counts of the transaction's
// writes, which are the session's counts since it last reported them.
// A handler that commits on its own, stays idle long enough for the
// session to report its counts (a second), begins again, puts the mark
// back and makes the counts what the end expects (its own row updated as
// often as the claim's count says) passed every check: its request
// completed as if its transaction were the claim's. The end also compares
// when the transaction began, which the handler cannot set, with the time
// pgstore read as it began the claim's: the handler ended the claim's
// transaction itself, and its key fails closed (docs/semantics.md §5.4).
// What it wrote before its own COMMIT (here, another tenant's key
// deleted) committed with that COMMIT, as any handler's raw COMMIT does.
func TestAtkFinalAHandlerThatPutsTheMarkBackPassesTheEnd(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}
	acme := tenantClaim("acme", "m1", "tok-acme")
	tx := wonClaimTx(t, s, acme)
	h := tx.Driver().(pgx.Tx)
	simple := pgx.QueryExecModeSimpleProtocol
	var mark string
	var ins, del int64
	if err := h.QueryRow(ctx, `SELECT current_setting('idemgen.transaction'),
	        pg_stat_get_xact_tuples_inserted('idempotency_keys'::regclass) + pg_stat_get_xact_tuples_updated('idempotency_keys'::regclass),
	        pg_stat_get_xact_tuples_deleted('idempotency_keys'::regclass)
	        + coalesce(pg_stat_get_xact_tuples_inserted(to_regclass('idempotency_phases')), 0)
	        + coalesce(pg_stat_get_xact_tuples_updated(to_regclass('idempotency_phases')), 0)
	        + coalesce(pg_stat_get_xact_tuples_deleted(to_regclass('idempotency_phases')), 0)
	        + coalesce(pg_stat_get_xact_tuples_updated(to_regclass('idempotency_outbox')), 0)
	        + coalesce(pg_stat_get_xact_tuples_deleted(to_regclass('idempotency_outbox')), 0)`, simple).Scan(&mark, &ins, &del); err != nil {
		t.Fatal(err)
	}
	steps := []string{
		`DELETE FROM idempotency_keys WHERE tenant = 'globex'`,
		`COMMIT`,
		// Idle, outside a transaction, past PostgreSQL's minimum
		// interval between reports of a session's counts.
		`SELECT pg_sleep(1.2)`,
		`SELECT 1`,
		`BEGIN ISOLATION LEVEL READ COMMITTED`,
		`SELECT set_config('idemgen.transaction', '` + mark + `', true)`,
	}
	for _, q := range steps {
		if _, err := h.Exec(ctx, q, simple); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	var now0, now1 int64
	if err := h.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_inserted('idempotency_keys'::regclass) + pg_stat_get_xact_tuples_updated('idempotency_keys'::regclass),
	        pg_stat_get_xact_tuples_deleted('idempotency_keys'::regclass)`, simple).Scan(&now0, &now1); err != nil {
		t.Fatal(err)
	}
	t.Logf("counts at the start %d, %d; after the report %d, %d", ins, del, now0, now1)
	for range ins - now0 {
		if _, err := h.Exec(ctx, `UPDATE idempotency_keys SET state = state WHERE tenant = 'acme' AND key = 'm1'`, simple); err != nil {
			t.Fatal(err)
		}
	}
	if del != 0 || now1 != 0 {
		t.Logf("deletes counted before (%d) or after the report (%d): the end will see them", del, now1)
	}
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})
	if !errors.Is(mcommit, idemstore.ErrOutcomeUnknown) {
		t.Fatalf("acme's Commit = %v; want its outcome unknown: its handler committed on its own, began again and put the mark back", mcommit)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE tenant = 'acme' AND key = 'm1'`).Scan(&state); err != nil || state != "indeterminate" {
		t.Fatalf("acme's key is %q (%v); want indeterminate", state, err)
	}
}
