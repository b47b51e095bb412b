// Package pgstoretest gives a test a PostgreSQL schema of its own with
// pgstore's table and functions in it, dropped when the test ends. It reads
// the server's URL from IDEMGEN_TEST_DATABASE_URL and skips the test when
// that is unset.
package pgstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// URLEnv names the environment variable that holds the test server's URL.
const URLEnv = "IDEMGEN_TEST_DATABASE_URL"

// New creates a fresh schema, migrates it and returns a store on it, with
// a URL that selects the schema (through search_path) for tools that take
// one.
func New(t testing.TB) (*pgstore.Store, string) {
	t.Helper()
	base := os.Getenv(URLEnv)
	if base == "" {
		t.Skip(URLEnv + " is unset; set it to a PostgreSQL URL (postgres://user@host:port/db) to run the PostgreSQL tests")
	}
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "idemtest_" + hex.EncodeToString(b)
	exec := func(sql string) error {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", URLEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pgstore.New(pool), u.String()
}
