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

// PostgresURL creates a database of its own for the test and drops it at
// the end; without IDEMGEN_TEST_DATABASE_URL the test is skipped.
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
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
