package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// urlEnv names the single Redis the tests use (a URL such as
// redis://127.0.0.1:6379/0). The cluster tests start their own servers and
// need only redis-server and redis-cli on PATH.
const urlEnv = "IDEMGEN_TEST_REDIS_URL"

// cluster is the Redis Cluster of three masters that the cluster tests
// run against: started on loopback ports at its first use and stopped when
// the tests end. A child process of a multi-process test is handed the
// running cluster's addresses in IDEMGEN_REDISSTORE_CLUSTER instead of
// starting one. With urlEnv set, Redis is expected on this machine, and a
// cluster that cannot start is a failure rather than a skip.
var cluster = &redistest.Shared{AddrsEnv: "IDEMGEN_REDISSTORE_CLUSTER", RequiredEnv: urlEnv}

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

// backend is one kind of Redis deployment the tests run against.
type backend struct {
	name string
	// open returns a client of the deployment; tweak adjusts its options.
	open func(t testing.TB, tweak ...func(*redis.UniversalOptions)) redis.UniversalClient
}

// backends returns the deployments to test: the single Redis of urlEnv and
// a 3-master cluster on loopback, each skipped with its reason when it is
// not available.
func backends() []backend {
	return []backend{{"single", singleClient}, {"cluster", clusterClient}}
}

// eachBackend runs fn as a subtest per backend.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func singleURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skip(urlEnv + " is unset; set it to a Redis URL (redis://127.0.0.1:6379/0) to run the single-node tests")
	}
	return u
}

func singleClient(t testing.TB, tweak ...func(*redis.UniversalOptions)) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(singleURL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", urlEnv, err)
	}
	uo := &redis.UniversalOptions{
		Addrs: []string{opt.Addr}, DB: opt.DB, Username: opt.Username, Password: opt.Password,
		TLSConfig: opt.TLSConfig, PoolSize: 32,
	}
	for _, f := range tweak {
		f(uo)
	}
	c := redis.NewClient(uo.Simple())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clusterClient(t testing.TB, tweak ...func(*redis.UniversalOptions)) redis.UniversalClient {
	t.Helper()
	addrs := cluster.Addrs(t)
	uo := &redis.UniversalOptions{Addrs: addrs, PoolSize: 32}
	for _, f := range tweak {
		f(uo)
	}
	c := redis.NewClusterClient(uo.Cluster())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newPrefix returns a key prefix of the test's own and deletes every key
// under it when the test ends.
func newPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	prefix := "idemtest:" + randomHex(6) + ":"
	t.Cleanup(func() {
		if err := redistest.DeleteUnder(context.Background(), c, prefix); err != nil {
			t.Errorf("delete keys under %s: %v", prefix, err)
		}
	})
	return prefix
}

// newStore returns a store on the backend under a fresh prefix.
func newStore(t testing.TB, b backend, opts ...redisstore.Option) (*redisstore.Store, redis.UniversalClient) {
	t.Helper()
	c := b.open(t)
	return storeOn(t, c, opts...), c
}

// storeOn returns a store on c under a fresh prefix.
func storeOn(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(newPrefix(t, c))}, opts...)...)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	return s
}
