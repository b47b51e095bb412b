package lincheck

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// phaseTTL is the time to live the engine gives a recorded phase: the
// operation's TTL (enginetest.EnginePolicy's hour) and its lease.
const phaseTTL = time.Hour + serviceLease

// redisPhases reads back the charge phases recorded under prefix on
// every master of c (once the run is over), with the time each was
// recorded: Redis keeps none, so it is read off the time the phase's key
// has left to live, by Redis's clock, which is this machine's.
func redisPhases(c redis.UniversalClient, prefix string) func() ([]phaseRecord, error) {
	return func() ([]phaseRecord, error) {
		ctx := context.Background()
		var (
			mu  sync.Mutex
			out []phaseRecord
		)
		read := func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+"{*}:phase:"+effectCharge, 1000).Iterator()
			for iter.Next(ctx) {
				k := iter.Val()
				now := time.Now()
				v, err := node.Get(ctx, k).Result()
				if err != nil {
					return err
				}
				left, err := node.PTTL(ctx, k).Result()
				if err != nil {
					return err
				}
				mu.Lock()
				out = append(out, phaseRecord{Result: v, At: now.Add(left - phaseTTL)})
				mu.Unlock()
			}
			return iter.Err()
		}
		err := redistest.EachMaster(ctx, c, read)
		return out, err
	}
}
