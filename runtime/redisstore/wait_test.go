package redisstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// With WithReplicaAck(0, …) every write goes through the WAIT path (the script
// and WAIT pipelined on the primary's connection), which must keep the
// whole contract.
func TestConformanceWithReplicaAck(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		storetest.Run(t, target(b.open(t), redisstore.WithReplicaAck(0, 100*time.Millisecond)))
	})
}

// The test servers have no replicas, so WAIT 1 is never satisfied: the
// store fails closed. The claim is given back (a later claim wins afresh),
// and through the engine the request is a 503 that runs nothing.
func TestWaitWithoutReplicasFailsClosed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		s := storeOn(t, c, redisstore.WithReplicaAck(1, 50*time.Millisecond))
		plain, err := redisstore.New(c, redisstore.WithPrefix(prefixOf(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()

		start := time.Now()
		_, err = s.Claim(ctx, newClaim("k"))
		if !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("Claim with WAIT 1 and no replica: %v, want ErrNotReplicated", err)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("Claim failed after %v, before WAIT's 50ms timeout", d)
		}
		if res, err := plain.Claim(ctx, newClaim("k")); err != nil || !res.Won || res.TookOver {
			t.Errorf("claim after the unreplicated one = %+v, %v; want a fresh win", res, err)
		}

		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			enginetest.Created(w, r.Header.Get("Idempotency-Key"))
		})
		es := enginetest.ServeEngine(t, s, handler, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.FailClosed, false))
		a := es.MustPost(t, "/transfers", "via-engine", `{"amount":1}`)
		if err := enginetest.CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
			t.Error(err)
		}
		if n := es.RunsOf("via-engine"); n != 0 {
			t.Errorf("handler ran %d times, want 0", n)
		}
	})
}

// prefixOf recovers the prefix a store was made with from a key name.
func prefixOf(t *testing.T, s *redisstore.Store) string {
	t.Helper()
	k := s.Key(idemstore.Identity{})
	return k[:len(k)-len("{")-64-len("}")]
}

func TestWaitOptionChecks(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redisstore.New(ring, redisstore.WithReplicaAck(1, time.Second)); err == nil {
		t.Errorf("New accepted WithReplicaAck on a Ring")
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	for _, w := range []struct {
		n int
		d time.Duration
	}{{-1, time.Second}, {1, 0}} {
		if _, err := redisstore.New(single, redisstore.WithReplicaAck(w.n, w.d)); err == nil {
			t.Errorf("New accepted WithReplicaAck(%d, %v)", w.n, w.d)
		}
	}
	if _, err := redisstore.New(single, redisstore.WithReplicaAck(1, time.Second)); err != nil {
		t.Errorf("New refused WithReplicaAck on a *redis.Client: %v", err)
	}
}
