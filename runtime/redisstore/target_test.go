package redisstore_test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// target is the store to every suite of storetest: a store with a fresh
// prefix on c, with opts, on Redis's clock or on the suite's.
func target(c redis.UniversalClient, opts ...redisstore.Option) storetest.Target {
	return storetest.Target{Open: func(t *testing.T, clock *storetest.Clock) storetest.Instance {
		o := slices.Clip(opts)
		if clock != nil {
			o = append(o, redisstore.WithClock(clock.Now))
		}
		s := storeOn(t, c, o...)
		return storetest.Instance{
			Store: s,
			Dump:  func(t *testing.T) []byte { return dumpKeys(t, c) },
			// A phase expires by Redis's clock, whatever the store's.
			PhaseTTL: func(ctx context.Context, id idemstore.Identity, name string) (time.Duration, error) {
				return c.PTTL(ctx, s.PhaseKey(id, name)).Result()
			},
		}
	}}
}

// dumpKeys returns every key's name and every field and value of its
// hash, on every master.
func dumpKeys(t *testing.T, c redis.UniversalClient) []byte {
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
	if err := redistest.EachMaster(ctx, c, read); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
