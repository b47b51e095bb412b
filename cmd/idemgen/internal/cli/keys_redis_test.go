package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// redisURLEnv names the single Redis the Redis keys tests run against.
const redisURLEnv = "IDEMGEN_TEST_REDIS_URL"

// cluster is the Redis Cluster the cluster keys tests run against, started
// at its first use and stopped by TestMain.
var cluster = &redistest.Shared{RequiredEnv: redisURLEnv}

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

// redisKeysStore is a Redis store under a prefix of the test's own, named
// to idemgen keys by url and the --redis-prefix flag.
func redisKeysStore(t *testing.T) keysStore {
	url := os.Getenv(redisURLEnv)
	if url == "" {
		t.Skip(redisURLEnv + " is unset; set it to a Redis URL (redis://127.0.0.1:6379/0) to run the Redis keys tests")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return redisStoreOn(t, "redis", redis.NewClient(opt), url)
}

// redisClusterKeysStore is redisKeysStore on a 3-master cluster.
func redisClusterKeysStore(t *testing.T) keysStore {
	addrs := cluster.Addrs(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	st := redisStoreOn(t, "redis-cluster", c, "redis://"+addrs[0]+"?addr="+strings.Join(addrs[1:], "&addr="))
	st.flags = append(st.flags, "--redis-cluster")
	return st
}

func redisStoreOn(t *testing.T, name string, c redis.UniversalClient, url string) keysStore {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "idemkeys:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		if err := redistest.DeleteUnder(context.Background(), c, prefix); err != nil {
			t.Errorf("delete keys under %s: %v", prefix, err)
		}
		_ = c.Close()
	})
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return keysStore{name: name, store: s, url: url, flags: []string{"--redis-prefix", prefix}}
}
