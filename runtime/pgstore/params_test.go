package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// docs/semantics.md §7.2: the types of a statement's parameters are fixed
// when it is prepared, and pgx's cache prepares pgstore's statements on
// first use on a connection, which may come inside a handler's
// transaction. Tenant A's keyless handler, first on its connection, puts a
// temporary view in front of the key table whose key is a name (63 bytes
// at most) and runs pgstore's claim through it, so that pgx caches the
// claim with a key parameter that truncates. Once A's session is reset,
// tenant B's claim of a long key on that connection must still be a claim
// of that key: the same request sent again on another connection must
// not win it a second time.
func TestHandlerCannotTypeTheClaimsParameters(t *testing.T) {
	s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	seedKey(t, pool)
	a, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	handlerExec(t, a, `CREATE TEMP VIEW idempotency_keys AS SELECT tenant::name AS tenant, scope::name AS scope, key::name AS key,
		state, operation, fingerprint, lease_until, status, headers, body, body_omitted, expires_at FROM idempotency_keys`)
	// The seed's row is there, so the claim runs no function: it caches.
	rows, err := a.Driver().(pgx.Tx).Query(ctx, pgstore.ClaimSQL, "t9", "s9", "seed", "op", []byte{0}, "tok", int64(1000), int64(1000), false, false)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The view goes before the commit: a transaction whose end finds the
	// store's table named otherwise does not commit.
	handlerExec(t, a, `DROP VIEW idempotency_keys`)
	if err := a.Commit(ctx, idemstore.Response{}); err != nil {
		t.Fatalf("A's commit: %v", err)
	}
	b := claimFor(strings.Repeat("x", 80), "tok-b", time.Minute)
	b.Tenant = "t2"
	if res, err := s.Claim(ctx, b); err != nil || !res.Won {
		t.Fatalf("B's claim = %+v, %v; want won", res, err)
	}
	pool.Reset()
	b.Token = "tok-b2"
	if res, err := s.Claim(ctx, b); err != nil || res.Won {
		t.Fatalf("B's claim sent again on another connection = %+v, %v; want the key in flight", res, err)
	}
}

// A handler that has pgx cache the claim through a view whose columns
// are of other types than the key table's makes the claim's next run on
// the connection, once the view is gone, fail with "cached plan must not
// change result type"; tenant B's claim must win all the same.
func TestHandlerCannotTypeTheClaimsResult(t *testing.T) {
	s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	seedKey(t, pool)
	a, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	handlerExec(t, a, `CREATE TEMP VIEW idempotency_keys AS SELECT tenant, scope, key, state::name AS state,
		operation, fingerprint, lease_until, status, headers, body, body_omitted, expires_at FROM idempotency_keys`)
	rows, err := a.Driver().(pgx.Tx).Query(ctx, pgstore.ClaimSQL, "t9", "s9", "seed", "op", []byte{0}, "tok", int64(1000), int64(1000), false, false)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The view goes before the commit: a transaction whose end finds the
	// store's table named otherwise does not commit.
	handlerExec(t, a, `DROP VIEW idempotency_keys`)
	if err := a.Commit(ctx, idemstore.Response{}); err != nil {
		t.Fatalf("A's commit: %v", err)
	}
	b := claimFor("k-b", "tok-b", time.Minute)
	b.Tenant = "t2"
	if res, err := s.Claim(ctx, b); err != nil || !res.Won {
		t.Fatalf("B's claim = %+v, %v; want won", res, err)
	}
}

// seedKey stores the completed key that the claims above read: a
// handler's transaction may not write it (docs/semantics.md §7.2).
func seedKey(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO idempotency_keys (tenant, scope, key, operation, fingerprint, state, expires_at, status)
		VALUES ('t9', 's9', 'seed', 'op', '\x00', 'completed', clock_timestamp() + interval '1 hour', 201)`); err != nil {
		t.Fatal(err)
	}
}
