package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// hideInContinuation wraps stmt so that it reads as a string to a split
// of the bytes and as a statement to PostgreSQL: a string continued on
// the next line keeps the kind of its first part, so the empty escape
// string, a newline, then quote, backslash, quote, quote is one escape
// string read with backslashes, though its second part has no E, and
// the plain '\' after it closes before stmt (standard_conforming_strings
// on, no setting changed).
func hideInContinuation(stmt string) string { return "SELECT E''\n'\\'', '\\'; " + stmt + "; --'" }

// hideInSJIS wraps stmt so that it reads as a string to a split of the
// bytes and as a statement to a server whose client_encoding is SJIS
// (BIG5, GBK and GB18030 alike): the server converts the text before
// reading it, so 0x95 0x5c is one character, not a byte and a backslash
// escaping the quote after it.
func hideInSJIS(stmt string) string { return "SELECT E'\x95\\'; " + stmt + "; --'" }

// A COMMIT hidden from a split of the text's bytes is refused all the
// same, and what the handler wrote before it is not committed.
func TestAHiddenCommitIsRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup []string
		text  string
	}{
		{"continued escape string", nil, hideInContinuation("COMMIT")},
		{"SJIS client_encoding", []string{"SET client_encoding = 'SJIS'"}, hideInSJIS("COMMIT")},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := wonTx(t, s, "k1", "tok1")
			h := tx.Driver().(pgx.Tx)
			if err := writeEffect(ctx, h, "charge"); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatal(err)
			}
			for _, q := range c.setup {
				if _, err := h.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			_, err := h.Exec(ctx, c.text, pgx.QueryExecModeSimpleProtocol)
			t.Logf("the hidden COMMIT: %v", err)
			_ = tx.Commit(ctx, idemstore.Response{Status: 201})
			if !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
				t.Errorf("the handler's COMMIT was sent: %v; want ErrHandlerEndsTransaction", err)
			}
			if n, err := countEffects(ctx, pool, "charge"); err != nil || n != 0 {
				t.Errorf("the handler's write committed %d times (%v); want 0", n, err)
			}
		})
	}
}

// The same routes, end to end: acme's handler deletes globex's key,
// commits that, and opens a new transaction carrying its mark; globex's
// retry must still replay.
func TestAHiddenCommitCannotReleaseAnotherTenantsKey(t *testing.T) {
	for name, ending := range map[string][]string{
		"continued escape string": {hideInContinuation(`COMMIT`), hideInContinuation(`BEGIN ISOLATION LEVEL READ COMMITTED`)},
		"SJIS client_encoding": {`SET client_encoding = 'SJIS'`, hideInSJIS(`COMMIT`),
			hideInSJIS(`BEGIN ISOLATION LEVEL READ COMMITTED`), `SET client_encoding = 'UTF8'`},
	} {
		t.Run(name, func(t *testing.T) {
			refused, acmeErr := handlerEndsWithAnotherTenantsKeyDeleted(t, ending)
			t.Logf("acme's Commit = %v", acmeErr)
			if len(refused) == 0 {
				t.Errorf("no statement refused; want the hidden COMMIT and BEGIN refused")
			}
		})
	}
}

// handlerEndsWithAnotherTenantsKeyDeleted has acme's handler delete
// globex's completed key, run ending (statements meant to end the
// transaction and begin another past the guard), restore the mark of its
// transaction and commit, and holds globex's retry to its stored
// response and its charge to one. It returns the statements refused and
// acme's Commit's error.
func handlerEndsWithAnotherTenantsKeyDeleted(t *testing.T, ending []string) (refused []string, acmeErr error) {
	t.Helper()
	s, pool := newStore(t)
	ctx := context.Background()
	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, `INSERT INTO effects (marker) VALUES ('globex-charge')`) {
		t.Fatal("globex's first claim lost")
	}
	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	h := tx.Driver().(pgx.Tx)
	simple := pgx.QueryExecModeSimpleProtocol
	var mark string
	if err := h.QueryRow(ctx, `SELECT current_setting('idemgen.transaction')`, simple).Scan(&mark); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	steps := append([]string{`DELETE FROM idempotency_keys WHERE tenant = 'globex'`}, ending...)
	steps = append(steps, `SELECT set_config('idemgen.transaction', '`+mark+`', true)`)
	for _, q := range steps {
		if _, err := h.Exec(ctx, q, simple); errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			refused = append(refused, q)
		} else if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%q: %v", q, err)
		}
	}
	acmeErr = tx.Commit(ctx, idemstore.Response{Status: 201})
	res, rtx, err := s.ClaimTx(ctx, tenantClaim("globex", "v1", "tok-globex-retry"))
	if err != nil {
		t.Fatal(err)
	}
	if rtx != nil {
		_ = rtx.Rollback(ctx)
	}
	if res.Won || res.Existing.Response == nil || res.Existing.Response.Status != 201 {
		t.Errorf("globex's retry = %+v; want its completed response replayed: acme's handler deleted its key and committed", res)
	}
	if n, err := countEffects(ctx, pool, "globex-charge"); err != nil || n != 1 {
		t.Errorf("globex's charge committed %d times (%v); want 1", n, err)
	}
	return refused, acmeErr
}
