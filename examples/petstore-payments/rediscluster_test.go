package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// redisCluster is a Redis Cluster of three masters on loopback ports,
// started at its first use and stopped by TestMain. With
// IDEMGEN_TEST_REDIS_URL set, Redis is expected on this machine and a
// cluster that cannot start fails the test instead of skipping it.
var redisCluster = &redistest.Shared{RequiredEnv: "IDEMGEN_TEST_REDIS_URL"}

// clusterStoreURL is the --idempotency-store URL of the cluster at addrs:
// the first address as the URL's host, the others as addr parameters.
func clusterStoreURL(addrs []string) string {
	u := "redis+cluster://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// TestRedisClusterStore runs the example with its non-transactional
// operations' keys in a Redis Cluster: replays and a reused key's 422 come
// from the cluster, and the records spread over its masters.
func TestRedisClusterStore(t *testing.T) {
	t.Parallel()
	addrs := redisCluster.Addrs(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	prefix := "petstore-e2e-" + labtest.RandomHex(6) + ":"
	t.Cleanup(func() {
		defer client.Close()
		if err := redistest.DeleteUnder(ctx, client, prefix); err != nil {
			t.Errorf("delete the test's Redis keys: %v", err)
		}
	})
	rs, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	s := bins.StartServer(t, labtest.SQLiteURL(t), "--idempotency-store", clusterStoreURL(addrs), "--redis-key-prefix", prefix)
	c := labtest.NewClient(t, s, labtest.KeyAcme)
	recordKey := func(op, key string) string {
		return rs.Key(idemstore.Identity{Tenant: "acme", Scope: op, Key: key})
	}

	// Enough keys that all of them landing on one of the three masters
	// is a one-in-ten-million chance: a client that did not follow the
	// cluster's slots would be answered MOVED for most of them.
	const accounts = 16
	var keys []string
	for i := range accounts {
		key := fmt.Sprintf("acct-%d-%s", i, labtest.RandomHex(8))
		body := fmt.Sprintf(`{"owner":"Ada %d","currency":"EUR","initial_balance":%d}`, i, 100+i)
		first := c.Expect(201, "POST", "/accounts", key, body)
		replayed(t, first, c.Expect(201, "POST", "/accounts", key, body))
		keys = append(keys, key)
	}
	c.ExpectProblem(422, "idempotency-key-reused", "POST", "/accounts", keys[0], `{"owner":"Ada 0","currency":"EUR","initial_balance":999}`)

	pet := `{"name":"Rex","species":"dog"}`
	petKey := "pet-" + labtest.RandomHex(8)
	first := c.Expect(201, "POST", "/pets", petKey, pet)
	replayed(t, first, c.Expect(201, "POST", "/pets", petKey, pet))
	c.ExpectProblem(422, "idempotency-key-reused", "POST", "/pets", petKey, `{"name":"Rex","species":"cat"}`)

	for _, key := range keys {
		if n, err := client.Exists(ctx, recordKey(api.OpCreateAccount, key)).Result(); err != nil || n != 1 {
			t.Errorf("the record of %s key %s is not in the cluster (%d, %v)", api.OpCreateAccount, key, n, err)
		}
	}
	if n, err := client.Exists(ctx, recordKey(api.OpCreatePet, petKey)).Result(); err != nil || n != 1 {
		t.Errorf("the record of %s key %s is not in the cluster (%d, %v)", api.OpCreatePet, petKey, n, err)
	}
	var holding atomic.Int32 // ForEachMaster asks the masters concurrently
	err = client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		if iter.Next(ctx) {
			holding.Add(1)
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := holding.Load(); n < 2 {
		t.Errorf("the records of %d keys are on %d of the cluster's %d masters, want them spread", accounts+1, n, len(addrs))
	}

	// The replay came from the cluster: without the record the same retry
	// opens a second account.
	if err := client.Del(ctx, recordKey(api.OpCreateAccount, keys[1])).Err(); err != nil {
		t.Fatal(err)
	}
	again := c.Expect(201, "POST", "/accounts", keys[1], `{"owner":"Ada 1","currency":"EUR","initial_balance":101}`)
	if again.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("with the cluster's record deleted the retry was still answered from a store: %s", again)
	}
}

// TestRedisStoreURLRefused: an --idempotency-store URL the service cannot
// use stops it at start with a sentence that says why, and never with the
// URL's password in the log: a malformed URL, a cluster URL with a
// database, a server that does not answer, a single-node URL on a cluster
// node and a cluster URL on a single Redis.
func TestRedisStoreURLRefused(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pa55"
	cases := []struct{ url, want string }{
		{"memcached://app:" + secret + "@127.0.0.1:11211", "want redis://"},
		{"redis://app:" + secret + "@[::1/0", "redis://app:xxxxx@"},
		{"redis://app:" + secret + "@127.0.0.1:1/0", "redis at redis://app:xxxxx@127.0.0.1:1/0"},
		{"redis+cluster://app:" + secret + "@127.0.0.1:1/3", "only database 0"},
		{"redis+cluster://app:" + secret + "@127.0.0.1:1?addr=nohost", "addr param"},
		{"redis+cluster://app:" + secret + "@127.0.0.1:1?poolsize=3", "unexpected option"},
		{"redis+cluster://app:" + secret + "@127.0.0.1:1?addr=127.0.0.1:2", "redis at redis+cluster://app:xxxxx@127.0.0.1:1"},
		{"rediss+cluster://app:" + secret + "@[::1", "rediss+cluster://app:xxxxx@"},
	}
	if single := os.Getenv("IDEMGEN_TEST_REDIS_URL"); single != "" {
		opts, err := redis.ParseURL(single)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ url, want string }{"redis+cluster://" + opts.Addr, "cluster support disabled"})
	}
	if _, err := exec.LookPath("redis-server"); err == nil || os.Getenv("IDEMGEN_TEST_REDIS_URL") != "" {
		addrs := redisCluster.Addrs(t)
		cases = append(cases, struct{ url, want string }{"redis://" + addrs[0] + "/0", "is a node of a Redis Cluster"})
	}
	for _, tc := range cases {
		out, code := runToExit(t, nil, "--database-url", labtest.SQLiteURL(t), "--api-keys", labtest.APIKeys, "--idempotency-store", tc.url)
		if code != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("--idempotency-store %s: exit %d, want 1 and a log that says %q\n%s", tc.url, code, tc.want, out)
		}
		if strings.Contains(out, secret) {
			t.Errorf("--idempotency-store %s: the log shows the password\n%s", tc.url, out)
		}
	}
}
