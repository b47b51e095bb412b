package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/outboxtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

const urlEnv = "IDEMGEN_TEST_DATABASE_URL"

// helperEnv names the database of a child process (TestHelperProcess).
const helperEnv = "PGOUTBOX_HELPER_SCHEMA"

func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skip(urlEnv + " is unset; set it to a PostgreSQL URL to run the pgoutbox tests")
	}
	return u
}

// target is the outbox on a schema of its own per test.
var target = outboxtest.Target{NewDB: newSchema, Open: open, Migrate: migrate, HelperEnv: helperEnv}

// newSchema creates a schema with pgstore's tables, the outbox's, and a
// table of business writes; it is dropped when the test ends.
func newSchema(t *testing.T) string {
	t.Helper()
	url, ctx := testURL(t), context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "outboxtest_" + hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	pool := openPool(t, schema)
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// Twice: the second finds everything in place.
	for range 2 {
		if err := pgoutbox.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (marker text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return schema
}

func openPool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func open(t *testing.T, schema string, maxPayload int) outboxtest.Instance {
	pool := openPool(t, schema)
	t.Cleanup(pool.Close)
	return outboxtest.Instance{
		Store:  pgstore.New(pool),
		Outbox: pgoutbox.New(pool, idemoutbox.Options{MaxPayload: maxPayload}),
		Write: func(ctx context.Context, marker string) error {
			tx, err := idem.TxFor[pgx.Tx](ctx, "createOrder")
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO orders (marker) VALUES ($1)", marker)
			return err
		},
		Count: func(ctx context.Context, marker string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE marker = $1", marker).Scan(&n)
			return n, err
		},
		Block: func(ctx context.Context) (func(), error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, "SELECT id FROM idempotency_outbox FOR UPDATE"); err != nil {
				return nil, errors.Join(err, tx.Rollback(ctx))
			}
			return func() { _ = tx.Rollback(context.Background()) }, nil
		},
	}
}

// migrate applies the outbox's migration to schema, up or down.
func migrate(t *testing.T, schema string, up bool) {
	pool := openPool(t, schema)
	defer pool.Close()
	err := pgoutbox.Migrate(context.Background(), pool)
	if !up {
		_, down := pgoutbox.Schema()
		_, err = pool.Exec(context.Background(), down)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutbox(t *testing.T) { outboxtest.Run(t, target) }

func TestKills(t *testing.T) { outboxtest.RunKills(t, target) }

// TestHelperProcess is the child of the kill tests.
func TestHelperProcess(t *testing.T) { outboxtest.Child(t, target) }
