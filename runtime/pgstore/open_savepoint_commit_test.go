package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// openSavepointWipes are the handlers of commitTimeWipes whose work runs
// at COMMIT although the end fires the deferred triggers and closes the
// cursors before it, with a savepoint left open at their transaction's
// end, so that the statements the end sends before COMMIT run inside it.
func openSavepointWipes() map[string][]string {
	wipes := map[string][]string{}
	// The deferred trigger, fired before the end's check, defers itself
	// anew and queues another event, which fires at COMMIT; or it
	// declares a cursor WITH HOLD, whose query PostgreSQL runs as the
	// transaction commits.
	for _, name := range []string{"trigger that defers itself again", "trigger that declares a cursor WITH HOLD"} {
		wipes[name] = append(slices.Clip(commitTimeWipes[name]), `SAVEPOINT left_open`)
	}
	return wipes
}

// The end of a committing transaction makes it read-only just before its
// COMMIT, so that what PostgreSQL still runs inside the COMMIT (an event
// a trigger deferred anew, a cursor a trigger declared) can write nothing
// (docs/semantics.md §7.2: "No code of the handler's writes after these
// checks"). A handler that leaves a savepoint open has the end's
// statements run inside that savepoint: SET TRANSACTION READ ONLY makes
// only the subtransaction read-only, and COMMIT, which commits the open
// subtransaction before the top-level one, gives the transaction back its
// read-write state (PostgreSQL restores the upper level's XactReadOnly
// when a subtransaction commits) before the deferred triggers and the
// cursors' queries run. One of them deletes another tenant's completed
// key, the request commits, and that tenant's retry runs its handler
// again.
//
// A handler's own SAVEPOINT is refused (ErrHandlerEndsTransaction), and a
// nested transaction (pgx's Begin) that the handler leaves open is
// released before the end's statements run.
func TestAHandlersOpenSavepointUndoesTheReadOnlyCommit(t *testing.T) {
	for name, stmts := range openSavepointWipes() {
		for _, keyless := range []bool{false, true} {
			for _, nested := range []bool{false, true} {
				sub := name
				if keyless {
					sub += ", keyless"
				}
				if nested {
					sub += ", a nested transaction left open"
				}
				t.Run(sub, func(t *testing.T) {
					r, s, globex := globexCharged(t)
					acme := r.leavesSavepointOpen(t, s, keyless, nested, stmts)
					var n int
					if err := r.admin.QueryRow(context.Background(),
						`SELECT count(*) FROM `+r.schema+`.idempotency_keys WHERE tenant = 'globex'`).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						t.Errorf("acme's handler deleted globex's completed key at its COMMIT, through a savepoint it left open, "+
							"and acme's request committed (%v)", acme)
					}
					r.wantReplayOn(t, s, globex, "globex-charge", acme)
				})
			}
		}
	}
}

// leavesSavepointOpen runs stmts in acme's transaction, claimed or
// keyless, and commits it. The last of stmts opens a savepoint; with
// nested, a nested transaction left open (pgx's Begin) opens it instead,
// and the statements before it run in it. It returns the Commit's error.
func (r *roleStore) leavesSavepointOpen(t *testing.T, s *pgstore.Store, keyless, nested bool, stmts []string) error {
	t.Helper()
	ctx := context.Background()
	tx := acmeTx(t, s, keyless)
	h := tx.Driver().(pgx.Tx)
	if nested {
		var err error
		if h, err = h.Begin(ctx); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
		stmts = stmts[:len(stmts)-1]
	}
	for i, q := range stmts {
		q = r.replace(q)
		_, err := h.Exec(ctx, q)
		if i == len(stmts)-1 && !nested && errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			continue
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	err := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", err)
	return err
}

// A handler's nested transactions (pgx's Begin) work as pgx's do: one
// committed keeps its writes, one rolled back undoes them and leaves the
// transaction usable after a failed statement, one nested in another goes
// with it, and one the handler leaves open commits with the transaction.
// An ended one refuses every call. A statement prepared under the text of
// a savepoint's statement (which Prepare refuses) is not what ends the
// savepoint.
func TestAHandlersNestedTransactions(t *testing.T) {
	for _, keyless := range []bool{false, true} {
		t.Run(map[bool]string{false: "claimed", true: "keyless"}[keyless], func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := acmeTx(t, s, keyless)
			h := tx.Driver().(pgx.Tx)
			must := func(err error) {
				t.Helper()
				if err != nil {
					_ = tx.Rollback(ctx)
					t.Fatal(err)
				}
			}
			begin := func(p pgx.Tx) pgx.Tx {
				t.Helper()
				sp, err := p.Begin(ctx)
				must(err)
				return sp
			}
			insert := func(p pgx.Tx, marker string) {
				t.Helper()
				_, err := p.Exec(ctx, `INSERT INTO effects (marker) VALUES ($1)`, marker)
				must(err)
			}
			for _, name := range []string{"RELEASE SAVEPOINT pgstore_sp", "ROLLBACK TO SAVEPOINT pgstore_sp; RELEASE SAVEPOINT pgstore_sp"} {
				// Prepare refuses the name (ErrPreparedName); prepared
				// unchecked, it is not what ends the savepoint.
				if _, err := h.Prepare(ctx, name, `SELECT 1`); !errors.Is(err, pgstore.ErrPreparedName) {
					t.Errorf("Prepare under %q = %v; want ErrPreparedName", name, err)
				}
				must(pgstore.PrepareUnchecked(ctx, h, name, `SELECT 1`))
			}

			sp := begin(h)
			insert(sp, "kept")
			must(sp.Commit(ctx))
			if _, err := sp.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("an ended nested transaction's Exec: %v; want pgx.ErrTxClosed", err)
			}
			if err := sp.Commit(ctx); !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("an ended nested transaction's Commit: %v; want pgx.ErrTxClosed", err)
			}

			sp = begin(h)
			insert(sp, "undone")
			must(sp.Rollback(ctx))

			sp = begin(h)
			if _, err := sp.Exec(ctx, `SELECT 1/0`); err == nil {
				t.Error("1/0 did not fail")
			}
			must(sp.Rollback(ctx))
			insert(h, "after")

			outer := begin(h)
			inner := begin(outer)
			insert(inner, "inner")
			must(inner.Commit(ctx))
			must(outer.Rollback(ctx))

			open := begin(h)
			insert(open, "left open")
			insert(begin(open), "left open inside")

			if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatalf("Commit = %v", err)
			}
			wantEffects(t, pool, map[string]int{"kept": 1, "undone": 0, "after": 1, "inner": 0, "left open": 1, "left open inside": 1})
		})
	}
}

// acmeTx is acme's transaction on s, a won claim's or, with keyless, one
// without a key (Begin).
func acmeTx(t *testing.T, s *pgstore.Store, keyless bool) idemstore.Tx {
	t.Helper()
	if !keyless {
		return wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	}
	tx, err := s.Begin(context.Background(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}
