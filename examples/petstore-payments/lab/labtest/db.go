package labtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// RandomHex is n random bytes in hex: a name or key no other test uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Database is one kind of database a test runs on.
type Database struct {
	// Name names it in subtests: SQLite or Postgres.
	Name string
	// URL makes a fresh database for the test and returns its URL.
	URL func(testing.TB) string
}

// Databases are the two databases a test runs on.
func Databases() []Database {
	return []Database{{"SQLite", SQLiteURL}, {"Postgres", PostgresURL}}
}

// SQLiteURL is a fresh SQLite database in a test's temp dir.
func SQLiteURL(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "payments.db")
}

// PostgresURL creates a database of its own for the test, and a role that
// owns it and logs in with the URL returned, and drops both at the end;
// without IDEMGEN_TEST_DATABASE_URL the test is skipped. The role is no
// superuser, as the service's should not be (docs/semantics.md §7.2):
// pgstore warns of one, and a storm fails on any warning.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("IDEMGEN_TEST_DATABASE_URL")
	if base == "" {
		t.Skip("IDEMGEN_TEST_DATABASE_URL is unset; set it to a PostgreSQL URL to run the PostgreSQL end-to-end tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to IDEMGEN_TEST_DATABASE_URL: %v", err)
	}
	name := "petstore_e2e_" + RandomHex(6)
	t.Cleanup(func() {
		defer conn.Close(ctx)
		for _, q := range []string{"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)", "DROP ROLE IF EXISTS " + name} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	password := RandomHex(12)
	for _, q := range []string{"CREATE ROLE " + name + " LOGIN PASSWORD '" + password + "'", "CREATE DATABASE " + name + " OWNER " + name} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	u.User = url.UserPassword(name, password)
	return u.String()
}
