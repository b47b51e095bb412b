package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// replaceCached makes tx's handler replace the statement pgx has cached
// for sql with one of its own, prepared from SQL under the cache's name,
// taking params and answering as replacement does.
func replaceCached(t *testing.T, tx idemstore.Tx, sql, params, replacement string) {
	t.Helper()
	replaceNamed(t, tx, pgstore.CacheName(sql), params, replacement)
}

// replaceNamed makes tx's handler replace the statement prepared under
// name with one of its own, prepared from SQL.
func replaceNamed(t *testing.T, tx idemstore.Tx, name, params, replacement string) {
	t.Helper()
	stmt := "DEALLOCATE " + name + "; PREPARE " + name + "(" + params + ") AS " + replacement
	if _, err := tx.Driver().(pgx.Tx).Exec(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// preparedName returns the name of the statement prepared with the text
// sql on tx's session, found as any handler can find it.
func preparedName(t *testing.T, tx idemstore.Tx, sql string) string {
	t.Helper()
	var name string
	if err := tx.Driver().(pgx.Tx).QueryRow(context.Background(),
		"SELECT name FROM pg_prepared_statements WHERE statement = $1", sql).Scan(&name); err != nil {
		t.Fatalf("the prepared statement of %.40q: %v", sql, err)
	}
	return name
}

// docs/semantics.md §7.2: a statement a handler prepares never reaches a
// later request. Tenant A's handler replaces the statement pgx has cached
// for a query that tenant B's requests run on the same pooled connection;
// B's next run of that query must not return the rows A chose. So too
// when A's handler also replaces the statement pgstore checks the session
// with by one that finds nothing.
func TestHandlerCannotReplaceACachedStatement(t *testing.T) {
	const query = "SELECT marker FROM effects WHERE marker = $1"
	for _, e := range txEndings() {
		for _, check := range []bool{false, true} {
			name := e.name
			if check {
				name += ", the check replaced too"
			}
			t.Run(name, func(t *testing.T) {
				replaceCachedQuery(t, e, query, check)
			})
		}
	}
}

func replaceCachedQuery(t *testing.T, e txEnding, query string, check bool) {
	// One connection: the next request gets the one the handler used.
	s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	var got string
	if err := pool.QueryRow(ctx, query, "b").Scan(&got); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("B's query before A's request = %q, %v; want no rows", got, err)
	}
	// A first request prepares the check on the connection.
	if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
		t.Fatal(err)
	}
	tx := e.begin(t, s, "k-a")
	if check {
		replaceNamed(t, tx, preparedName(t, tx, pgstore.SessionCheckSQL), "text, float8", "SELECT NULL::void, NULL::void, false")
	}
	replaceCached(t, tx, query, "text", "SELECT 'chosen by A'::text")
	if err := e.end(ctx, tx); err != nil {
		t.Fatalf("ending A's transaction: %v", err)
	}
	err := pool.QueryRow(ctx, query, "b").Scan(&got)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("B's query after A's request = %q, %v; want no rows", got, err)
	}
}

// The same with pgstore's own claim: tenant A's handler replaces the
// cached claim with a statement that answers "completed" with a body A
// chose. Tenant B's first claim of a key nobody has used must still win
// the key, so that B's handler runs.
func TestHandlerCannotReplaceTheClaimStatement(t *testing.T) {
	forgeClaim(t, "", func(*testing.T, idemstore.Tx) {})
}

// Nor can a handler prepare a statement under pgx's cache name, or under
// the name of one of pgstore's own, through the transaction it was given,
// over the protocol as pgx and pgstore do.
func TestHandlerPrepareRefusesACacheName(t *testing.T) {
	s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	// The first transaction's end prepares pgstore's statements.
	if err := wonTx(t, s, "k-0", "tok-0").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	tx := wonTx(t, s, "k-a", "tok-a")
	defer func() { _ = tx.Rollback(ctx) }()
	const query = "SELECT marker FROM effects WHERE marker = $1"
	for _, name := range []string{pgstore.CacheName(query), preparedName(t, tx, pgstore.SessionCheckSQL)} {
		_, err := tx.Driver().(pgx.Tx).Prepare(ctx, name, "SELECT 'chosen by A'::text WHERE $1::text IS NOT NULL")
		if !errors.Is(err, pgstore.ErrCacheName) {
			t.Errorf("Prepare under %s: %v, want ErrCacheName", name, err)
		}
	}
}

// docs/scaling.md: a pool in pgx's cache_describe mode, the one for a
// pooler in transaction mode that cannot keep named statements, gets no
// named statement from pgstore either: the next transaction on the client
// connection may reach another server connection, where it would not be.
func TestDescribeModePreparesNothingByName(t *testing.T) {
	s, pool := newStore(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	})
	ctx := context.Background()
	if err := wonTx(t, s, "k1", "tok1").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if err := wonTx(t, s, "k2", "tok2").Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, err := pool.Query(ctx, "SELECT name FROM pg_prepared_statements")
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(names) != 0 {
		t.Fatalf("prepared statements on the session: %v, %v; want none", names, err)
	}
}

// replaceOverTheProtocol replaces, on tx's connection, the statement under
// the cache name of sql with replacement, prepared over the protocol as
// pgx prepares, taking the parameters of sql: what a handler that reached
// the connection by a route still open could do.
func replaceOverTheProtocol(t *testing.T, tx idemstore.Tx, sql, replacement string) {
	t.Helper()
	ctx := context.Background()
	pc := pgstore.ConnOf(tx).PgConn()
	sd, err := pc.Prepare(ctx, "", sql, nil)
	if err == nil {
		err = pc.Deallocate(ctx, pgstore.CacheName(sql))
	}
	if err == nil {
		_, err = pc.Prepare(ctx, pgstore.CacheName(sql), replacement, sd.ParamOIDs)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Nor does a statement prepared over the protocol under the cache name of
// another text, by whatever route, stand in for pgx's: the session it was
// prepared on is not reused. Tenant A's handler puts, under the name of
// the application's query and of pgstore's claim, statements that count
// every row and answer the claim "completed"; tenant B's query must count
// its own rows, and B's claim of a new key must win it.
func TestHandlerCannotPrepareUnderAnotherTextsCacheName(t *testing.T) {
	const query = "SELECT count(*) FROM effects WHERE marker = $1"
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			if _, err := pool.Exec(ctx, "INSERT INTO effects (marker) VALUES ('tenant-a-row')"); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := pool.QueryRow(ctx, query, "tenant-b").Scan(&n); err != nil || n != 0 {
				t.Fatalf("B's first query = %d, %v; want 0", n, err)
			}
			// Two transactions prepare the claim and the statements of the
			// ending.
			if err := e.end(ctx, e.begin(t, s, "k-warm")); err != nil {
				t.Fatal(err)
			}
			if err := wonTx(t, s, "k-warm2", "tok-warm2").Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatal(err)
			}
			a := e.begin(t, s, "k-a")
			replaceOverTheProtocol(t, a, query, "SELECT count(*) FROM effects WHERE $1::text IS NOT NULL")
			replaceOverTheProtocol(t, a, pgstore.ClaimSQL, forgedClaim)
			_ = e.end(ctx, a)
			if err := pool.QueryRow(ctx, query, "tenant-b").Scan(&n); err != nil || n != 0 {
				t.Errorf("B's query after A's request = %d, %v; want 0", n, err)
			}
			wantClaimWon(t, s)
		})
	}
}
