package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// cacheName is the name under which pgx's statement cache prepares sql on
// a connection: anyone who knows the text can compute it.
func cacheName(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return "stmtcache_" + hex.EncodeToString(sum[:24])
}

// replaceCached makes tx's handler replace the statement pgx has cached
// for sql with one of its own, prepared from SQL under the cache's name,
// taking params and answering as replacement does.
func replaceCached(t *testing.T, tx idemstore.Tx, sql, params, replacement string) {
	t.Helper()
	name := cacheName(sql)
	stmt := "DEALLOCATE " + name + "; PREPARE " + name + "(" + params + ") AS " + replacement
	if _, err := tx.Driver().(pgx.Tx).Exec(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// docs/semantics.md §7.2: a statement a handler prepares never reaches a
// later request. Tenant A's handler replaces the statement pgx has cached
// for a query that tenant B's requests run on the same pooled connection;
// B's next run of that query must not return the rows A chose.
func TestHandlerCannotReplaceACachedStatement(t *testing.T) {
	const query = "SELECT marker FROM effects WHERE marker = $1"
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			// One connection: the next request gets the one the handler used.
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			var got string
			if err := pool.QueryRow(ctx, query, "b").Scan(&got); !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("B's query before A's request = %q, %v; want no rows", got, err)
			}
			tx := e.begin(t, s, "k-a")
			replaceCached(t, tx, query, "text", "SELECT 'chosen by A'::text")
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending A's transaction: %v", err)
			}
			err := pool.QueryRow(ctx, query, "b").Scan(&got)
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("B's query after A's request = %q, %v; want no rows", got, err)
			}
		})
	}
}

// The same with pgstore's own claim: tenant A's handler replaces the
// cached claim with a statement that answers "completed" with a body A
// chose. Tenant B's first claim of a key nobody has used must still win
// the key, so that B's handler runs.
func TestHandlerCannotReplaceTheClaimStatement(t *testing.T) {
	const (
		params = "text, text, text, text, bytea, text, bigint, bigint, boolean, boolean"
		forged = `SELECT 'completed'::text, $4, $5, NULL::timestamptz, clock_timestamp(),
			201, NULL::bytea, 'chosen by A'::bytea, false, NULL::record`
	)
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			// The claim, cached on the connection.
			if res, err := s.Claim(ctx, claimFor("k-warm", "tok-warm", time.Minute)); err != nil || !res.Won {
				t.Fatalf("Claim = %+v, %v; want won", res, err)
			}
			tx := e.begin(t, s, "k-a")
			replaceCached(t, tx, pgstore.ClaimSQL, params, forged)
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending A's transaction: %v", err)
			}
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
		})
	}
}

// Nor can a handler prepare a statement under pgx's cache name through the
// transaction it was given, over the protocol as pgx's cache does.
func TestHandlerPrepareRefusesACacheName(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k-a", "tok-a")
	defer func() { _ = tx.Rollback(ctx) }()
	const query = "SELECT marker FROM effects WHERE marker = $1"
	_, err := tx.Driver().(pgx.Tx).Prepare(ctx, cacheName(query), "SELECT 'chosen by A'::text WHERE $1::text IS NOT NULL")
	if !errors.Is(err, pgstore.ErrCacheName) {
		t.Fatalf("Prepare under pgx's cache name: %v, want ErrCacheName", err)
	}
}
