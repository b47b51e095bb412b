package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// BenchmarkLoadPhase measures LoadPhase, a script that reads the phase on
// its master, against the plain GET it replaced, which a client reading
// from replicas sends to a replica. Both are one round trip to the Redis
// of IDEMGEN_TEST_REDIS_URL; what differs is the script's run.
func BenchmarkLoadPhase(b *testing.B) {
	ctx := context.Background()
	rc := singleClient(b)
	s, err := redisstore.New(rc, redisstore.WithPrefix("idembench:"))
	if err != nil {
		b.Fatal(err)
	}
	id := idemstore.Identity{Tenant: "t", Scope: "createTransfer", Key: "bench"}
	if _, err := s.RecordPhase(ctx, id, "charge", make([]byte, 64), time.Minute); err != nil {
		b.Fatal(err)
	}
	b.Run("script", func(b *testing.B) {
		for b.Loop() {
			if _, found, err := s.LoadPhase(ctx, id, "charge"); err != nil || !found {
				b.Fatal(found, err)
			}
		}
	})
	b.Run("GET", func(b *testing.B) {
		for b.Loop() {
			if err := rc.Get(ctx, s.PhaseKey(id, "charge")).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
