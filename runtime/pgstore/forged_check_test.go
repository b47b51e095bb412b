package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// forgedClaim is what tenant A's handler puts under the name pgx's cache
// gives the claim: a statement that takes the claim's parameters and
// answers "completed" with a body A chose.
const (
	forgedClaimParams = "text, text, text, text, bytea, text, bigint, bigint, boolean, boolean"
	forgedClaim       = `SELECT 'completed'::text, $4, $5, NULL::timestamptz, clock_timestamp(),
		201, NULL::bytea, 'chosen by A'::bytea, false, NULL::record`
)

// wantClaimWon fails the test unless tenant t2's first claim of a key
// nobody has used wins it: the handler of a request that claims a new key
// must run.
func wantClaimWon(t *testing.T, s *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	b := claimFor("k-b", "tok-b", time.Minute)
	b.Tenant = "t2"
	res, btx, err := s.ClaimTx(ctx, b)
	if btx != nil {
		defer func() { _ = btx.Rollback(ctx) }()
	}
	if err != nil || !res.Won {
		var body string
		if res.Existing.Response != nil {
			body = string(res.Existing.Response.Body)
		}
		t.Fatalf("B's claim of a new key = %+v (body %q), %v; want won", res, body, err)
	}
}

// forgeClaim runs, for each way a transaction ends, a store of one
// connection that has claimed a key and ended a first transaction, whose
// handler ran warm (nothing if empty), and a second transaction whose
// handler replaces the cached claim (forgedClaim) and then does what
// forge does; once that transaction has ended, tenant B's first claim of
// a new key on that connection must win.
func forgeClaim(t *testing.T, warm string, forge func(t *testing.T, tx idemstore.Tx)) {
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			if res, err := s.Claim(ctx, claimFor("k-warm", "tok-warm", time.Minute)); err != nil || !res.Won {
				t.Fatalf("Claim = %+v, %v; want won", res, err)
			}
			// A first transaction prepares its ending's statements.
			first := e.begin(t, s, "k-warm2")
			if warm != "" {
				handlerExec(t, first, warm)
			}
			if err := e.end(ctx, first); err != nil {
				t.Fatal(err)
			}
			tx := e.begin(t, s, "k-a")
			replaceCached(t, tx, pgstore.ClaimSQL, forgedClaimParams, forgedClaim)
			forge(t, tx)
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending A's transaction: %v", err)
			}
			wantClaimWon(t, s)
		})
	}
}

// handlerExec runs stmt in tx's handler.
func handlerExec(t *testing.T, tx idemstore.Tx, stmt string) {
	t.Helper()
	if _, err := tx.Driver().(pgx.Tx).Exec(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// docs/semantics.md §7.2: what decides whether a session is clean after a
// handler ran cannot be replaced by the handler. Tenant A's handler
// replaces the claim and, with a statement that answers "nothing left",
// the session check: under the name pgx's cache gives its text, and under
// the name it is prepared with on the session.
func TestHandlerReplacesTheSessionCheck(t *testing.T) {
	const nothingLeft = "SELECT pg_sleep(0), pg_sleep(0), false"
	t.Run("cache name", func(t *testing.T) {
		forgeClaim(t, "", func(t *testing.T, tx idemstore.Tx) {
			name := pgstore.CacheName(pgstore.SessionCheckSQL)
			handlerExec(t, tx, "DO $$BEGIN EXECUTE 'DEALLOCATE "+name+"'; EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END$$; "+
				"PREPARE "+name+"(text, double precision) AS "+nothingLeft)
		})
	})
	t.Run("prepared name", func(t *testing.T) {
		forgeClaim(t, "", func(t *testing.T, tx idemstore.Tx) {
			replaceNamed(t, tx, preparedName(t, tx, pgstore.SessionCheckSQL), "text, double precision", nothingLeft)
		})
	})
}

// Nor can a handler answer for the session check by shadowing the
// catalog it reads: a temporary relation is found before pg_catalog's
// under the same unqualified name. Tenant A's handler hides its
// statements, and its temporary objects, behind empty temporary views.
func TestHandlerShadowsTheSessionCheck(t *testing.T) {
	forgeClaim(t, "", func(t *testing.T, tx idemstore.Tx) {
		handlerExec(t, tx, `CREATE TEMP VIEW pg_prepared_statements AS SELECT * FROM pg_catalog.pg_prepared_statements WHERE false;
			CREATE TEMP VIEW pg_depend AS SELECT * FROM pg_catalog.pg_depend WHERE false`)
	})
}

// Nor by an operator of its own: the session check runs before the reset
// of the handler's settings, so under a search_path the handler set,
// which may put a schema it can create in before pg_catalog. Tenant A's
// handler makes oid = oid false there, which hides its temporary objects
// from the check, and leaves a temporary view that shadows a table tenant
// B reads on the same connection. The end of the transaction refuses an
// operator made in it as well (docs/semantics.md §7.2), and a refused
// commit's session is closed: either way B must not meet A's view.
func TestHandlerOperatorHidesFromTheSessionCheck(t *testing.T) {
	for _, e := range txEndings() {
		if e.name == "keyed Release" || e.name == "keyless Release" {
			continue // a rolled-back handler's objects and settings are gone
		}
		t.Run(e.name, func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
			tx := e.begin(t, s, "k-a")
			handlerExec(t, tx, `CREATE FUNCTION never(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT false';
				CREATE OPERATOR = (LEFTARG = oid, RIGHTARG = oid, FUNCTION = never);
				CREATE TEMP VIEW effects AS SELECT 'chosen by A'::text AS marker;
				SET search_path = `+schema+`, pg_catalog`)
			if err := e.end(ctx, tx); err != nil && !errors.Is(err, idemstore.ErrOutcomeUnknown) {
				t.Fatalf("ending A's transaction: %v", err)
			}
			var got string
			err := pool.QueryRow(ctx, "SELECT marker FROM effects WHERE marker = 'chosen by A'").Scan(&got)
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("B's query after A's request = %q, %v; want no rows", got, err)
			}
		})
	}
}

// Nor by replacing what the full reset runs: a handler's statement
// prepared from SQL (which outlives a rolled-back transaction too) makes
// the ending send the full reset, first on a request before, and tenant
// A's handler replaces the reset's deallocation, under the name pgx's
// cache gives its text and under pgstore's own, with a statement that
// does nothing. The replaced claim must still not outlive A's request.
func TestHandlerReplacesTheFullReset(t *testing.T) {
	forgeClaim(t, "PREPARE idem_warm AS SELECT 1", func(t *testing.T, tx idemstore.Tx) {
		for _, name := range []string{pgstore.CacheName(pgstore.DeallocateSQL), pgstore.OwnName(pgstore.DeallocateSQL)} {
			handlerExec(t, tx, "DO $$BEGIN EXECUTE 'DEALLOCATE "+name+"'; EXCEPTION WHEN invalid_sql_statement_name THEN NULL; END$$; "+
				"PREPARE "+name+" AS SELECT 1")
		}
	})
}
