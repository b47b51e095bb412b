package redisstore_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestSecretsKeepDataOutOfRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, c := newStore(t, b)
		storetest.Secrets(t, s, func(t *testing.T) []byte {
			// Every key's name and every field and value of its hash,
			// on every master.
			ctx := context.Background()
			var (
				mu  sync.Mutex // ForEachMaster reads the masters at once
				out bytes.Buffer
			)
			read := func(ctx context.Context, node *redis.Client) error {
				iter := node.Scan(ctx, 0, "*", 1000).Iterator()
				for iter.Next(ctx) {
					m, err := node.HGetAll(ctx, iter.Val()).Result()
					mu.Lock()
					out.WriteString(iter.Val() + "\n")
					if err == nil { // not a hash: another test's key
						for f, v := range m {
							out.WriteString(f + "=" + v + "\n")
						}
					}
					mu.Unlock()
				}
				return iter.Err()
			}
			var err error
			switch c := c.(type) {
			case *redis.ClusterClient:
				err = c.ForEachMaster(ctx, read)
			case *redis.Client:
				err = read(ctx, c)
			}
			if err != nil {
				t.Fatal(err)
			}
			return out.Bytes()
		})
	})
}
