package redisstore_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// A claim whose lease is longer than its TTL keeps the record until the
// lease ends, as the SQL stores and memstore do: an in-flight row with a
// running lease is never absent, so a second claim of the key must lose.
func TestLeaseLongerThanTTLKeepsTheRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		start := time.Unix(1_800_000_000, 0)
		clock := storetest.NewClock(start)
		s, _ := newStore(t, b, redisstore.WithClock(clock.Now))
		ctx := context.Background()

		first := newClaim("long-lease")
		first.Lease, first.TTL = 10*time.Second, time.Second
		if res, err := s.Claim(ctx, first); err != nil || !res.Won {
			t.Fatalf("first claim = %+v, %v", res, err)
		}
		clock.Set(start.Add(5 * time.Second))
		res, err := s.Claim(ctx, newClaim("long-lease"))
		if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
			t.Errorf("claim past the TTL, within the first lease = %+v, %v; want lost in flight", res, err)
		}
		if err := s.Complete(ctx, first.Identity, first.Token, idemstore.Response{Status: 201}); err != nil {
			t.Errorf("holder's Complete within its lease: %v", err)
		}
	})
}

// On Redis's clock the record's PEXPIREAT covers the lease too.
func TestLeaseLongerThanTTLMovesExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, c := newStore(t, b)
		ctx := context.Background()
		cl := newClaim("long-lease-pttl")
		cl.Lease, cl.TTL = time.Minute, time.Second
		if res, err := s.Claim(ctx, cl); err != nil || !res.Won {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		d, err := c.PTTL(ctx, s.Key(cl.Identity)).Result()
		if err != nil || d < 50*time.Second {
			t.Errorf("PTTL with a 1m lease and a 1s TTL = %v, %v; want about a minute", d, err)
		}
	})
}

// A takeover claim sent again after its reply was lost is still reported
// as a takeover: the engine logs and counts takeovers (a possible second
// run of a handler's effects), and must not count it as a plain first run.
func TestRetriedTakeoverReportsTakeover(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		s := storeOn(t, c)
		ctx := context.Background()
		first := newClaim("retried-takeover")
		if res, err := s.Claim(ctx, first); err != nil || !res.Won {
			t.Fatalf("first claim = %+v, %v", res, err)
		}
		if err := s.Abandon(ctx, first.Identity, first.Token, idemstore.Takeover); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
		c.AddHook(duplicator{})
		res, err := s.Claim(ctx, newClaim("retried-takeover"))
		if err != nil || !res.Won || !res.TookOver {
			t.Errorf("retried takeover = %+v, %v; want won and taken over", res, err)
		}
	})
}

// A release sent again after its reply was lost answers as the first run
// did, rather than fenced (which the engine logs as a claim left held).
func TestRetriedReleaseAnswersReleased(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		c := b.open(t)
		s := storeOn(t, c)
		ctx := context.Background()
		cl := newClaim("retried-release")
		if res, err := s.Claim(ctx, cl); err != nil || !res.Won {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		c.AddHook(duplicator{})
		if err := s.Release(ctx, cl.Identity, cl.Token); err != nil {
			t.Errorf("retried Release: %v, want nil", err)
		}
		if err := s.Release(ctx, cl.Identity, cl.Token); !errors.Is(err, idemstore.ErrFenced) {
			t.Errorf("second Release: %v, want ErrFenced", err)
		}
		if res, err := s.Claim(ctx, newClaim("retried-release")); err != nil || !res.Won {
			t.Errorf("claim after the release = %+v, %v; want won", res, err)
		}
	})
}

// A copy of a claim that Redis runs after its holder released the key (a
// resend left in a broken connection, run after the engine released the
// claim it could not confirm) must not claim the key again: nobody holds
// that token any more, so the key would stay in flight until its lease
// ended and then, failing closed, become indeterminate for a request that
// never ran. The key stays free for the next claim.
func TestStrayClaimAfterReleaseWinsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		ctx := context.Background()
		cl := claimFor("stray", "tok-"+randomHex(8))
		if res, err := s.Claim(ctx, cl); err != nil || !res.Won {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		if err := s.Release(ctx, cl.Identity, cl.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if res, err := s.Claim(ctx, cl); err != nil || res.Won {
			t.Errorf("the same claim run again after its release = %+v, %v; want not won", res, err)
		}
		next := claimFor("stray", "tok-"+randomHex(8))
		if res, err := s.Claim(ctx, next); err != nil || !res.Won || res.TookOver {
			t.Errorf("the next claim after the release = %+v, %v; want a plain win", res, err)
		}
	})
}

// The longest lease a claim can ask for is reported to a losing claim as
// a positive remainder, never one that overflows time.Duration.
func TestLongestLeaseRemainingIsPositive(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		for _, at := range []time.Time{time.UnixMicro(1), time.UnixMicro(2), time.UnixMicro(1_800_000_000_000_001)} {
			clock := storetest.NewClock(at)
			s, _ := newStore(t, b, redisstore.WithClock(clock.Now))
			first := newClaim("longest-lease")
			first.Lease = time.Duration(math.MaxInt64)
			if res, err := s.Claim(ctx, first); err != nil || !res.Won {
				t.Fatalf("claim = %+v, %v", res, err)
			}
			res, err := s.Claim(ctx, newClaim("longest-lease"))
			if err != nil || res.Won || res.Existing.LeaseRemaining <= 0 {
				t.Errorf("claim at %d µs against the longest lease = %+v, %v; want lost with a positive remainder", at.UnixMicro(), res, err)
			}
		}
	})
}

// A claim whose call failed is released by the engine before Redis may
// have run it (it lingers in a broken connection). The release finds
// nothing, but the late claim must still not win the key for a holder
// that is gone; another request's claim is not held up.
func TestStrayClaimAfterReleaseOfNothingWinsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s, _ := newStore(t, b)
		ctx := context.Background()
		cl := claimFor("stray-late", "tok-"+randomHex(8))
		if err := s.Release(ctx, cl.Identity, cl.Token); !errors.Is(err, idemstore.ErrFenced) {
			t.Fatalf("Release of a key never claimed = %v, want idemstore.ErrFenced", err)
		}
		if res, err := s.Claim(ctx, cl); err != nil || res.Won {
			t.Errorf("the released claim, run after its release = %+v, %v; want not won", res, err)
		}
		next := claimFor("stray-late", "tok-"+randomHex(8))
		if res, err := s.Claim(ctx, next); err != nil || !res.Won || res.TookOver {
			t.Errorf("another claim after the release = %+v, %v; want a plain win", res, err)
		}
	})
}
