package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// target is the store to every suite of storetest: on its own clock, or on
// the suite's.
var target = storetest.Target{Open: func(_ *testing.T, clock *storetest.Clock) storetest.Instance {
	if clock == nil {
		return storetest.Instance{Store: memstore.New()}
	}
	return storetest.Instance{Store: memstore.New(memstore.WithClock(clock.Now))}
}}

func TestConformance(t *testing.T) {
	storetest.Run(t, target)
}

func claim(key, token string) idemstore.Claim {
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "op", Key: key},
		Operation:     "op",
		Fingerprint:   []byte{1, 2, 3},
		Token:         token,
		Lease:         10 * time.Second,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.Takeover,
	}
}

// With an injected clock the boundaries are exact: a lease or TTL that ends
// at now has run out.
func TestClockBoundaries(t *testing.T) {
	ctx := context.Background()
	clk := storetest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.WithClock(clk.Now))

	if res, err := s.Claim(ctx, claim("k", "a")); err != nil || !res.Won {
		t.Fatalf("first claim = %+v, %v; want won", res, err)
	}
	clk.Advance(10*time.Second - time.Nanosecond)
	res, err := s.Claim(ctx, claim("k", "b"))
	if err != nil || res.Won {
		t.Fatalf("claim 1ns before the lease ends = %+v, %v; want lost", res, err)
	}
	if res.Existing.LeaseRemaining != time.Nanosecond {
		t.Errorf("LeaseRemaining = %v, want 1ns", res.Existing.LeaseRemaining)
	}
	clk.Advance(time.Nanosecond)
	if res, err := s.Claim(ctx, claim("k", "c")); err != nil || !res.Won || !res.TookOver {
		t.Fatalf("claim as the lease ends = %+v, %v; want a takeover", res, err)
	}

	// The key expires one hour after the first claim, not the takeover.
	clk.Advance(time.Hour - 10*time.Second - time.Nanosecond)
	if n, err := s.Sweep(ctx, 10); err != nil || n != 0 {
		t.Fatalf("Sweep 1ns before expiry = %d, %v; want 0", n, err)
	}
	clk.Advance(time.Nanosecond)
	if n, err := s.Sweep(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Sweep at expiry = %d, %v; want 1", n, err)
	}
	if s.Len() != 0 {
		t.Errorf("Len after sweep = %d, want 0", s.Len())
	}
}

func TestInvalidClaims(t *testing.T) {
	s := memstore.New()
	for name, mutate := range map[string]func(*idemstore.Claim){
		"empty token": func(c *idemstore.Claim) { c.Token = "" },
		"zero lease":  func(c *idemstore.Claim) { c.Lease = 0 },
		"zero ttl":    func(c *idemstore.Claim) { c.TTL = 0 },
		"no mode":     func(c *idemstore.Claim) { c.OnLeaseExpiry = "" },
	} {
		c := claim("k", "a")
		mutate(&c)
		if _, err := s.Claim(context.Background(), c); err == nil {
			t.Errorf("%s: Claim accepted it", name)
		}
	}
	if s.Len() != 0 {
		t.Errorf("invalid claims left %d rows", s.Len())
	}
}

func TestCanceledContext(t *testing.T) {
	s := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(ctx, claim("k", "a")); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a canceled context: %v, want context.Canceled", err)
	}
}
