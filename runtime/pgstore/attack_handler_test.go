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

// A transactional handler that puts a trigger on the phases' table inside
// its own transaction must not have that transaction commit: a trigger
// made on one of the store's tables in a handler's transaction is refused
// at its end (docs/semantics.md §7.2), since it would act on every request
// after it. The end of a transaction watches idempotency_keys alone, so
// the handler's commit goes through, and the trigger outlives it. Here it
// makes every phase another tenant records expire on the spot: the
// record "stands" when RecordPhase returns, and the next run of that
// tenant's request does not find it and calls its downstream again
// (docs/semantics.md §8.2: every later run finds the record and does not
// call run).
func TestAHandlersTriggerOnThePhasesTableLosesAnotherTenantsPhase(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", time.Minute))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v", res, err)
	}
	h := tx.Driver().(pgx.Tx)
	var schema string
	if err := h.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	evil := strings.ReplaceAll(`CREATE FUNCTION {schema}.forget_phase() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.expires_at := pg_catalog.clock_timestamp();
    RETURN NEW;
END
$$;
CREATE TRIGGER forget_phase BEFORE INSERT OR UPDATE ON {schema}.idempotency_phases
    FOR EACH ROW WHEN (NEW.tenant <> 't1') EXECUTE FUNCTION {schema}.forget_phase()`, "{schema}", schema)
	if _, err := h.Exec(ctx, evil); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	commitErr := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"ok":true}`)})
	t.Logf("the handler's Commit after it made the trigger: %v", commitErr)

	globex := idemstore.Identity{Tenant: "globex", Scope: "createTransfer", Key: "v1 00"}
	stored, err := s.RecordPhase(ctx, globex, "charge", []byte("ch_1"), time.Hour)
	if err != nil {
		t.Fatalf("RecordPhase: %v", err)
	}
	got, found, err := s.LoadPhase(ctx, globex, "charge")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("globex's phase: recorded %q, then found %v (%q)", stored, found, got)
	if commitErr == nil && string(stored) == "ch_1" && !found {
		t.Errorf("a handler's transaction that made a trigger on idempotency_phases committed, and another tenant's phase, recorded as %q, is not found by its next run: it calls its downstream again", stored)
	}
}

// A transactional handler writes through the transaction that holds its
// claim, on the store's own table as well as its business tables: nothing
// at the transaction's end looks at which rows of idempotency_keys the
// transaction wrote besides its own claim. One tenant's handler that
// deletes another tenant's completed key (or rewrites its response)
// commits with its request, and globex's retry runs again
// (docs/semantics.md §3.5: a completed key replays).
func TestAHandlerRewritesAnotherTenantsKeyInItsTransaction(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}

	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant <> 'acme'`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	mcommit := tx.Commit(ctx, idemstore.Response{Status: 201})

	retry := globex
	retry.Token = "tok-globex-retry"
	runCharge(t, s, retry, `INSERT INTO effects (marker) VALUES ('globex-charge')`)
	n, err := countEffects(ctx, pool, "globex-charge")
	if err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("another tenant's completed request ran again (its write committed %d times): acme's transaction deleted its key and committed (%v)", n, mcommit)
	}
}

// runCharge runs c's request as a client would send it: claimed in a
// transaction of s and, when the claim wins, a handler that makes one
// write (charge) and commits. It reports whether the claim won.
func runCharge(t *testing.T, s *pgstore.Store, c idemstore.Claim, charge string) bool {
	t.Helper()
	ctx := context.Background()
	res, tx, err := s.ClaimTx(ctx, c)
	if err != nil {
		t.Fatalf("%s's claim: %v", c.Tenant, err)
	}
	if !res.Won {
		return false
	}
	if _, err := tx.Driver().(pgx.Tx).Exec(ctx, charge); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"charge":1}`)}); err != nil {
		t.Fatal(err)
	}
	return true
}
