package overhead_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// redisURLEnv names the Redis the Redis rows run against.
const redisURLEnv = "IDEMGEN_TEST_REDIS_URL"

// store is one store the engine runs over, opened as a service would open
// it: with its defaults, migrated, empty.
type store struct {
	name string
	open func(tb testing.TB) idemstore.Store
}

// stores returns the four stores in the order of the published table.
func stores() []store {
	return []store{
		{"memory", func(testing.TB) idemstore.Store { return memstore.New() }},
		{"sqlite", openSQLite},
		{"postgres", openPostgres},
		{"redis", openRedis},
	}
}

// openSQLite opens a database file of the test's own with sqlitestore.Open
// (WAL, IMMEDIATE transactions, the store's busy timeout) and migrates it.
func openSQLite(tb testing.TB) idemstore.Store {
	tb.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(tb.TempDir(), "idem.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	if err := s.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return s
}

// openPostgres gives the test a schema of its own, migrated, on a pool with
// pgxpool's defaults; the schema is dropped when the test ends.
func openPostgres(tb testing.TB) idemstore.Store {
	tb.Helper()
	s, _ := pgstoretest.New(tb)
	return s
}

// openRedis opens a client of the Redis named by IDEMGEN_TEST_REDIS_URL
// with go-redis's defaults, and a store under a key prefix of the test's
// own, whose keys are deleted when the test ends.
func openRedis(tb testing.TB) idemstore.Store {
	tb.Helper()
	u := os.Getenv(redisURLEnv)
	if u == "" {
		tb.Skip(redisURLEnv + " is unset; set it to a Redis URL (redis://127.0.0.1:6379/0) to run the Redis rows")
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		tb.Fatalf("%s: %v", redisURLEnv, err)
	}
	client := redis.NewClient(opts)
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		tb.Fatalf("Redis at %s: %v", redisURLEnv, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "idembench:" + hex.EncodeToString(b) + ":"
	tb.Cleanup(func() {
		defer client.Close()
		if err := redistest.DeleteUnder(ctx, client, prefix); err != nil {
			tb.Errorf("delete the keys under %s: %v", prefix, err)
		}
	})
	s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
