package main_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// redisStore returns the --idempotency-store URL of the Redis named by
// IDEMGEN_TEST_REDIS_URL, a key prefix of the test's own (the Redis may be
// shared, and the day replay's keys repeat from run to run) and a store
// reading under it; the test's keys are deleted at its end. Without the
// variable the test is skipped.
func redisStore(t *testing.T) (storeURL, prefix string, rs *redisstore.Store, client *redis.Client) {
	t.Helper()
	storeURL = os.Getenv("IDEMGEN_TEST_REDIS_URL")
	if storeURL == "" {
		t.Skip("IDEMGEN_TEST_REDIS_URL is unset; set it to a Redis URL to run the example on Redis")
	}
	opts, err := redis.ParseURL(storeURL)
	if err != nil {
		t.Fatalf("IDEMGEN_TEST_REDIS_URL: %v", err)
	}
	client = redis.NewClient(opts)
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at IDEMGEN_TEST_REDIS_URL: %v", err)
	}
	prefix = "petstore-e2e-" + labtest.RandomHex(6) + ":"
	t.Cleanup(func() {
		defer client.Close()
		if err := redistest.DeleteUnder(ctx, client, prefix); err != nil {
			t.Errorf("delete the test's Redis keys: %v", err)
		}
	})
	rs, err = redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return storeURL, prefix, rs, client
}

// TestRedisStore runs the example with its non-transactional operations'
// keys in Redis and its transactional ones in PostgreSQL, and checks that
// each replay comes from the store its operation belongs to.
func TestRedisStore(t *testing.T) {
	t.Parallel()
	storeURL, prefix, rs, client := redisStore(t)
	dbURL := labtest.PostgresURL(t)
	s := bins.StartServer(t, dbURL, "--idempotency-store", storeURL, "--redis-key-prefix", prefix)
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	// inRedis reports whether op's record of key is in Redis; inSQL
	// whether it is in the SQL table.
	inRedis := func(op, key string) bool {
		t.Helper()
		n, err := client.Exists(ctx, rs.Key(idemstore.Identity{Tenant: "acme", Scope: op, Key: key})).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	inSQL := func(op, key string) bool {
		t.Helper()
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE tenant = 'acme' AND scope = $1 AND key = $2 AND state = 'completed'`, op, key).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	t.Run("NonTransactionalOnRedis", func(t *testing.T) {
		key := "acct-" + labtest.RandomHex(8)
		body := `{"owner":"Ada","currency":"EUR","initial_balance":100}`
		first := c.Expect(201, "POST", "/accounts", key, body)
		replayed(t, first, c.Expect(201, "POST", "/accounts", key, body))
		if !inRedis(api.OpCreateAccount, key) {
			t.Errorf("the key of %s is not in Redis under %s", api.OpCreateAccount, prefix)
		}
		if inSQL(api.OpCreateAccount, key) {
			t.Errorf("the key of %s is in the SQL table; it belongs in Redis", api.OpCreateAccount)
		}
		// The replay came from Redis: without the Redis record the same
		// retry opens a second account.
		if err := client.Del(ctx, rs.Key(idemstore.Identity{Tenant: "acme", Scope: api.OpCreateAccount, Key: key})).Err(); err != nil {
			t.Fatal(err)
		}
		again := c.Expect(201, "POST", "/accounts", key, body)
		if again.Header.Get("Idempotent-Replayed") != "" || again.JSON(t)["id"] == first.JSON(t)["id"] {
			t.Errorf("with the Redis record deleted the retry was still answered from a store: %s", again)
		}
	})

	t.Run("TransactionalOnSQL", func(t *testing.T) {
		from, to := c.CreateAccount("Bea", "EUR", 500), c.CreateAccount("Cy", "EUR", 0)
		key := "tr-" + labtest.RandomHex(8)
		body := labtest.TransferBody(from, to, 120, "rent")
		first := c.Expect(201, "POST", "/transfers", key, body)
		replayed(t, first, c.Expect(201, "POST", "/transfers", key, body))
		if !inSQL(api.OpCreateTransfer, key) {
			t.Errorf("the key of %s is not completed in the SQL table", api.OpCreateTransfer)
		}
		if inRedis(api.OpCreateTransfer, key) {
			t.Errorf("the key of %s is in Redis; a transactional operation must stay on SQL", api.OpCreateTransfer)
		}
		if got := c.Balance(from); got != 380 {
			t.Errorf("balance of the source %d after a transfer and its replay, want 380", got)
		}
	})
}

// TestRedisDayReplay plays the small day against the example with Redis
// for its non-transactional operations: no transfer twice.
func TestRedisDayReplay(t *testing.T) {
	t.Parallel()
	storeURL, prefix, _, _ := redisStore(t)
	s := bins.StartLab(t, labtest.PostgresURL(t), "--chaos-delay", labtest.DayChaosDelay, "--idempotency-store", storeURL, "--redis-key-prefix", prefix)
	rep := labtest.PlayDay(t, labtest.SmallDay(t, s.URL))
	if rep.Retries == 0 {
		t.Errorf("no request was retried; the day did not exercise idempotency")
	}
	labtest.CheckSafe(t, rep)
}

// replayed fails t unless again is the replay of first: the same status
// and body, marked Idempotent-Replayed.
func replayed(t *testing.T, first, again labtest.Response) {
	t.Helper()
	if again.Status != first.Status || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry got %s (replayed %q), want the replay of %s", again, again.Header.Get("Idempotent-Replayed"), first)
	}
}
