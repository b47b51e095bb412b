package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler that sets client_encoding to a multi-byte encoding whose
// second bytes include 0x5c (SJIS, BIG5, GBK, GB18030) changes how the
// server reads a backslash: the server converts the text to UTF-8 before
// lexing it, so 0x95 0x5c is one character, not 0x95 and a backslash
// escaping the quote that follows. The guard's lexer reads the bytes and
// sees the COMMIT inside an escape string (E'...'); the server sees it at top level.
func TestAtk6ClientEncodingHidesCommit(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	h := tx.Driver().(pgx.Tx)
	if err := writeEffect(ctx, h, "charge"); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if _, err := h.Exec(ctx, "SET client_encoding = 'SJIS'", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("SET client_encoding: %v", err)
	}
	_, err := h.Exec(ctx, hideInSJIS("COMMIT"), pgx.QueryExecModeSimpleProtocol)
	t.Logf("the hidden COMMIT: %v", err)
	_ = tx.Commit(ctx, idemstore.Response{Status: 201})
	if !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
		t.Errorf("the handler's COMMIT was sent: %v; want ErrHandlerEndsTransaction", err)
	}
	if n, err := countEffects(ctx, pool, "charge"); err != nil || n != 0 {
		t.Errorf("the handler's write committed %d times (%v); want 0", n, err)
	}
}

// hideInSJIS wraps stmt so that the guard's lexer reads it inside an
// E” string while a server whose client_encoding is SJIS reads it as a
// top-level statement: 0x95 0x5c is one SJIS character, so the quote
// after it closes the string.
func hideInSJIS(stmt string) string { return "SELECT E'\x95\\'; " + stmt + "; --'" }

// The same route, end to end: acme's handler deletes globex's key,
// commits that, and opens a new transaction carrying its mark, with
// every statement passing the guard; globex's retry then runs again.
func TestAtk6ClientEncodingCommitsAnotherTenantsKeyDeletion(t *testing.T) {
	hiddenCommitReleasesAnotherTenantsKey(t, []string{
		`SET client_encoding = 'SJIS'`,
		hideInSJIS(`COMMIT`),
		hideInSJIS(`BEGIN ISOLATION LEVEL READ COMMITTED`),
		`SET client_encoding = 'UTF8'`,
	})
}

// hiddenCommitReleasesAnotherTenantsKey has acme's handler delete
// globex's completed key, run ending (statements meant to end the
// transaction and begin another past the guard), and restore the mark
// of its transaction; globex's retry must still find its response.
func hiddenCommitReleasesAnotherTenantsKey(t *testing.T, ending []string) {
	t.Helper()
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
	steps := append([]string{`DELETE FROM idempotency_keys WHERE tenant = 'globex'`}, ending...)
	steps = append(steps, `SELECT set_config('idemgen.transaction', '`+mark+`', true)`)
	var refused []string
	for _, q := range steps {
		if _, err := h.Exec(ctx, q, simple); errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			refused = append(refused, q)
		} else if err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%q: %v", q, err)
		}
	}
	if len(refused) == 0 {
		t.Errorf("no statement refused; want the hidden COMMIT and BEGIN refused")
	}
	acmeErr := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit = %v", acmeErr)
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
}
