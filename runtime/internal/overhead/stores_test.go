package overhead_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// redisURLEnv names the Redis the Redis rows run against.
const redisURLEnv = "IDEMGEN_TEST_REDIS_URL"

// store is one store the engine runs over, opened as a service would open
// it: with its defaults, migrated, empty. open returns it with the handler
// each side serves.
type store struct {
	name string
	open func(tb testing.TB, h *transfers) backend
}

// backend is what one row of the table runs: the store, and the handler
// each side serves.
type backend struct {
	store                  idemstore.Store
	transactional          bool
	unprotected, protected http.Handler
	// written, when set, counts the transfers the handler has stored: one
	// for each of its runs.
	written func() (int64, error)
}

// plain is s under the handler as it stands on both sides, not
// transactional: the four stores' rows compare the same work.
func plain(s idemstore.Store, h *transfers) backend {
	return backend{store: s, unprotected: h, protected: h}
}

// stores returns the stores in the order of the published table: the four
// on the same handler, then PostgreSQL's transactional path.
func stores() []store {
	return []store{
		{"memory", func(_ testing.TB, h *transfers) backend { return plain(memstore.New(), h) }},
		{"sqlite", func(tb testing.TB, h *transfers) backend { return plain(openSQLite(tb), h) }},
		{"postgres", func(tb testing.TB, h *transfers) backend { return plain(openPostgres(tb), h) }},
		{"redis", func(tb testing.TB, h *transfers) backend { return plain(openRedis(tb), h) }},
		{"postgres-tx", openPostgresTx},
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

// openPostgresTx is PostgreSQL's transactional path: a store on a pool
// with pgxpool's defaults, in a schema of the test's own with a table of
// transfers, and a handler that inserts the transfer before it answers.
// Unprotected, the handler makes its insert between a BEGIN and a COMMIT
// of its own on the same pool; protected, through the transaction in
// which the engine claimed the key (ClaimTx), which commits with the key's
// completion.
func openPostgresTx(tb testing.TB, h *transfers) backend {
	tb.Helper()
	_, url := pgstoretest.New(tb)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE transfers (id text PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		tb.Fatal(err)
	}
	const insert = `INSERT INTO transfers (id, amount) VALUES ($1, 1000)`
	unprotected := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, func(ctx context.Context, id string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, id)
				return err
			})
		})
	})
	protected := idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		h.serve(w, r, func(ctx context.Context, id string) error {
			_, err := tx.Exec(ctx, insert, id)
			return err
		})
	})
	written := func() (n int64, err error) {
		err = pool.QueryRow(ctx, `SELECT count(*) FROM transfers`).Scan(&n)
		return n, err
	}
	return backend{store: pgstore.New(pool), transactional: true, unprotected: unprotected, protected: protected, written: written}
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
