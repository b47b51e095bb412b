package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// docs/semantics.md §7.2: a statement a handler drops is not left for
// later requests to miss. Tenant A's handler deallocates the statements
// that end its transaction (DEALLOCATE ALL, or pgstore's first by the
// name it has on the session), which pgx still takes for prepared: A's
// own end may fail, but the transactions and claims that come after it
// on the one connection, keyless or keyed, must succeed.
func TestHandlerDeallocatesTheEnding(t *testing.T) {
	deallocate := map[string]func(t *testing.T, tx idemstore.Tx) string{
		"all": func(*testing.T, idemstore.Tx) string { return "DEALLOCATE ALL" },
		// The check of the transaction's mark, which a keyed Commit makes
		// in its completion.
		"the first statement": func(t *testing.T, tx idemstore.Tx) string {
			return "DEALLOCATE " + preparedName(t, tx, pgstore.SameTxSQL)
		},
		"the completion": func(t *testing.T, tx idemstore.Tx) string {
			return "DEALLOCATE " + preparedName(t, tx, pgstore.CompleteTxSQL)
		},
	}
	for what, stmt := range deallocate {
		for _, e := range txEndings() {
			if (what == "the completion") != (e.name == "keyed Commit") {
				// Only a keyed Commit sends the completion; it sends no
				// check of its own.
				continue
			}
			t.Run(what+", "+e.name, func(t *testing.T) {
				s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
				ctx := context.Background()
				// A first transaction prepares its ending's statements.
				if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
					t.Fatal(err)
				}
				tx := e.begin(t, s, "k-a")
				handlerExec(t, tx, stmt(t, tx))
				_ = e.end(ctx, tx)
				for i, next := range txEndings() {
					if err := next.end(ctx, next.begin(t, s, "k-b"+next.name)); err != nil {
						t.Fatalf("%s %d after A's: %v", next.name, i, err)
					}
				}
			})
		}
	}
}

// So too for the statements pgx's cache keeps for pgstore's claims,
// transactions' begins, completions and releases: tenant A's keyless
// handler drops them, and tenant B's claims, begin, completion and
// release on the one connection must each succeed at once.
func TestHandlerDeallocatesCachedStatements(t *testing.T) {
	s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	b := func(key string) idemstore.Claim {
		c := claimFor(key, "tok-"+key, time.Minute)
		c.Tenant = "t2"
		return c
	}
	drop := func() {
		t.Helper()
		a, err := s.Begin(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{pgstore.ClaimSQL, pgstore.CompleteSQL, pgstore.ReleaseSQL, pgstore.TxTimeoutsSQL} {
			handlerExec(t, a, "DO $$BEGIN EXECUTE 'DEALLOCATE "+pgstore.CacheName(sql)+"'; "+
				"EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END$$")
		}
		if err := a.Commit(ctx, idemstore.Response{}); err != nil {
			t.Fatalf("A's commit: %v", err)
		}
	}
	// The first of each prepares it on the connection; A drops those that
	// are there.
	for _, key := range []string{"k-0", "k-1"} {
		if res, err := s.Claim(ctx, b(key)); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v; want won", res, err)
		}
	}
	if err := s.Complete(ctx, b("k-0").Identity, "tok-k-0", idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, b("k-1").Identity, "tok-k-1"); err != nil {
		t.Fatal(err)
	}
	drop()
	if res, err := s.Claim(ctx, b("k-b")); err != nil || !res.Won {
		t.Fatalf("B's Claim after A's = %+v, %v; want won", res, err)
	}
	drop()
	if err := s.Complete(ctx, b("k-b").Identity, "tok-k-b", idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("B's Complete after A's: %v", err)
	}
	drop()
	res, tx, err := s.ClaimTx(ctx, b("k-c"))
	if err != nil || !res.Won {
		t.Fatalf("B's ClaimTx after A's = %+v, %v; want won", res, err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	drop()
	if tx, err = s.Begin(ctx, time.Minute); err != nil {
		t.Fatalf("B's Begin after A's: %v", err)
	}
	if err := tx.Commit(ctx, idemstore.Response{}); err != nil {
		t.Fatal(err)
	}
	res, tx, err = s.ClaimTx(ctx, b("k-c2"))
	if err != nil || !res.Won {
		t.Fatalf("B's ClaimTx after A's = %+v, %v; want won", res, err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, b("k-d")); err != nil || !res.Won {
		t.Fatalf("Claim = %+v, %v; want won", res, err)
	}
	drop()
	if err := s.Release(ctx, b("k-d").Identity, "tok-k-d"); err != nil {
		t.Fatalf("B's Release after A's: %v", err)
	}
}

// A statement of pgstore's own that a handler drops without using it in
// its own transaction's end is one the next transaction's end, another
// tenant's, would miss after its handler ran. Tenant A's keyless handler
// drops the keyed completion's; tenant B's keyed transaction after it on
// the one connection must commit.
func TestHandlerDeallocatesAnotherEnding(t *testing.T) {
	s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	if err := wonTx(t, s, "k-0", "tok-0").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	handlerExec(t, a, "DEALLOCATE "+pgstore.OwnName(pgstore.CompleteTxSQL))
	if err := a.Commit(ctx, idemstore.Response{}); err != nil {
		t.Fatalf("A's commit: %v", err)
	}
	b := claimFor("k-b", "tok-b", time.Minute)
	b.Tenant = "t2"
	res, tx, err := s.ClaimTx(ctx, b)
	if err != nil || !res.Won {
		t.Fatalf("B's claim = %+v, %v; want won", res, err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("B's commit after A's: %v", err)
	}
}
