package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A string constant continued on the next line keeps the kind of its
// first part: an empty escape string, a newline, then a part of
// quote, backslash, quote, quote is one escape string, read with
// backslashes, though its second part has no E. The guard reads that
// second part as a plain string, once with backslashes (which then
// misreads the plain '\' after it) and once without (which misreads the
// continuation), and each reading finds the COMMIT inside a string,
// while PostgreSQL, standard_conforming_strings on, runs it.
func TestAtk6ContinuedEscapeStringHidesCommit(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	h := tx.Driver().(pgx.Tx)
	if err := writeEffect(ctx, h, "charge"); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	_, err := h.Exec(ctx, "SELECT E''\n'\\'', '\\'; COMMIT; --'", pgx.QueryExecModeSimpleProtocol)
	t.Logf("the hidden COMMIT: %v", err)
	_ = tx.Commit(ctx, idemstore.Response{Status: 201})
	if !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
		t.Errorf("the handler's COMMIT was sent: %v; want ErrHandlerEndsTransaction", err)
	}
	if n, err := countEffects(ctx, pool, "charge"); err != nil || n != 0 {
		t.Errorf("the handler's write committed %d times (%v); want 0", n, err)
	}
}

// hideInContinuation wraps stmt as the test above does.
func hideInContinuation(stmt string) string { return "SELECT E''\n'\\'', '\\'; " + stmt + "; --'" }

// The same route, end to end and with no setting changed: acme's
// handler deletes globex's key and commits that; globex's retry then
// runs again.
func TestAtk6ContinuedEscapeStringCommitsAnotherTenantsKeyDeletion(t *testing.T) {
	hiddenCommitReleasesAnotherTenantsKey(t, []string{
		hideInContinuation(`COMMIT`),
		hideInContinuation(`BEGIN ISOLATION LEVEL READ COMMITTED`),
	})
}
