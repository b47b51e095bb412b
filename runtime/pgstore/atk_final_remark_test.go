package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The end of a handler's transaction told the transaction pgstore began
// from one the handler began by its mark, idemgen.transaction, which the
// handler can read, and by PostgreSQL's counts of the transaction's
// writes, which are the session's counts since it last reported them.
// A handler that commits on its own, stays idle long enough for the
// session to report its counts (a second), begins again, puts the mark
// back and makes the counts what the end expects (its own row updated as
// often as the claim's count says) passed every check: its request
// completed as if its transaction were the claim's. Checked at the end
// only, its raw COMMIT had already committed what it wrote before (here,
// another tenant's key deleted), and that tenant's completed request ran
// again. The handler's COMMIT is refused before it is sent
// (docs/semantics.md §5.4): nothing of its transaction commits, and the
// other tenant's key still replays.
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
	if err := h.QueryRow(ctx, `SELECT current_setting('idemgen.transaction')`, simple).Scan(&mark); err != nil {
		_ = tx.Rollback(ctx)
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
	var refused []string
	for _, q := range steps {
		if _, err := h.Exec(ctx, q, simple); errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			refused = append(refused, q)
		} else if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	if len(refused) != 2 {
		t.Errorf("refused %q; want the COMMIT and the BEGIN", refused)
	}
	// The handler wrote the store's table, so the end cannot tell its
	// transaction from one it ended: the key may be left indeterminate,
	// but nothing of the transaction commits.
	if mcommit := tx.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(mcommit, pgstore.ErrHandlerEndsTransaction) {
		t.Errorf("acme's Commit = %v; want it rolled back for the handler's refused COMMIT", mcommit)
	}
	res, rtx, err := s.ClaimTx(ctx, tenantClaim("globex", "v1", "tok-globex-retry"))
	if err != nil {
		t.Fatal(err)
	}
	if rtx != nil {
		_ = rtx.Rollback(ctx)
	}
	if res.Won || res.Existing.Response == nil || res.Existing.Response.Status != 201 {
		t.Errorf("globex's retry = %+v; want its completed response replayed: acme's transaction deleted its key and committed", res)
	}
	if n, err := countEffects(ctx, pool, "globex-charge"); err != nil || n != 1 {
		t.Errorf("globex's charge committed %d times (%v); want 1", n, err)
	}
}
