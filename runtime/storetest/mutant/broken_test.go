package mutant_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/mutant"
)

// claimOf is a claim of key under tenant for body.
func claimOf(tenant, key, body string, lease, ttl time.Duration) idemstore.Claim {
	sum := sha256.Sum256([]byte(body))
	return idemstore.Claim{
		Identity:    idemstore.Identity{Tenant: tenant, Scope: "createTransfer", Key: key},
		Operation:   "createTransfer",
		Fingerprint: sum[:],
		Token:       tenant + key + body + time.Now().String(),
		Lease:       lease, TTL: ttl, OnLeaseExpiry: idemstore.Takeover,
	}
}

// Each mutant that the suites pass is broken where a client can see it:
// on a memory store on a clock the test moves, it does what a correct
// store never does.
func TestMutantsAreBroken(t *testing.T) {
	ctx := context.Background()
	open := func(m mutant.Mutant) (idemstore.Store, *storetest.Clock) {
		clock := storetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		return m.Wrap(memstore.New(memstore.WithClock(clock.Now))), clock
	}
	t.Run("lease-in-whole-seconds", func(t *testing.T) {
		s, clock := open(mutant.LeaseInWholeSeconds)
		mustWon(t, s, claimOf("t", "k", "b", 2500*time.Millisecond, time.Hour))
		clock.Advance(2100 * time.Millisecond)
		if res, _ := s.Claim(ctx, claimOf("t", "k", "b", 2500*time.Millisecond, time.Hour)); !res.Won {
			t.Fatalf("a retry 2.1 s into a 2.5 s lease lost: %+v", res)
		}
	})
	t.Run("ttl-capped", func(t *testing.T) {
		s, clock := open(mutant.TTLCapped)
		c := claimOf("t", "k", "b", time.Second, 24*time.Hour)
		mustWon(t, s, c)
		if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: http.StatusCreated}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		if res, _ := s.Claim(ctx, claimOf("t", "k", "b", time.Second, 24*time.Hour)); !res.Won {
			t.Fatalf("a retry 2 minutes into a 24 h TTL lost: %+v", res)
		}
	})
	t.Run("large-body-truncated", func(t *testing.T) {
		s, _ := open(mutant.LargeBodyTruncated)
		c := claimOf("t", "k", "b", time.Second, time.Hour)
		mustWon(t, s, c)
		body := bytes.Repeat([]byte("x"), 100<<10)
		if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: http.StatusCreated, Body: body}); err != nil {
			t.Fatal(err)
		}
		res, _ := s.Claim(ctx, claimOf("t", "k", "b", time.Second, time.Hour))
		if res.Existing.Response == nil || len(res.Existing.Response.Body) == len(body) {
			t.Fatalf("the replay is whole: %+v", res.Existing.State)
		}
	})
	t.Run("identity-joined", func(t *testing.T) {
		s, _ := open(mutant.IdentityJoined)
		c := claimOf("a", "b:c", "b", time.Second, time.Hour)
		mustWon(t, s, c)
		if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: http.StatusCreated, Body: []byte("a's")}); err != nil {
			t.Fatal(err)
		}
		res, _ := s.Claim(ctx, claimOf("a:b", "c", "b", time.Second, time.Hour))
		if res.Won || res.Existing.Response == nil {
			t.Fatalf("tenant a:b's key c is not tenant a's key b:c: %+v", res)
		}
	})
	t.Run("phase-ttl-capped", func(t *testing.T) {
		s, clock := open(mutant.PhaseTTLCapped)
		ps := s.(idemstore.PhaseStore)
		id := idemstore.Identity{Tenant: "t", Scope: "createTransfer", Key: "k"}
		if _, err := ps.RecordPhase(ctx, id, "charge", []byte("ch_1"), 24*time.Hour); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		if _, found, _ := ps.LoadPhase(ctx, id, "charge"); found {
			t.Fatal("the phase is found 2 minutes into its 24 h ttl")
		}
	})
	t.Run("racy-takeover", func(t *testing.T) {
		// Real time: the takeover needs a lease that runs out.
		s := mutant.RacyTakeover.Wrap(memstore.New())
		mustWon(t, s, claimOf("t", "k", "b", time.Millisecond, time.Hour))
		time.Sleep(10 * time.Millisecond)
		won := 0
		for range 200 {
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins := 0
			key := time.Now().String()
			mustWon(t, s, claimOf("t", key, "b", time.Millisecond, time.Hour))
			time.Sleep(2 * time.Millisecond)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := s.Claim(ctx, claimOf("t", key, "b", time.Minute, time.Hour))
					if err == nil && res.Won {
						mu.Lock()
						wins++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if wins > 1 {
				won++
			}
		}
		if won == 0 {
			t.Fatal("no two overlapping takeovers of a key both won, in 200 tries")
		}
		t.Logf("%d of 200 keys taken over twice at once", won)
	})
}

func mustWon(t *testing.T, s idemstore.Store, c idemstore.Claim) {
	t.Helper()
	res, err := s.Claim(context.Background(), c)
	if err != nil || !res.Won {
		t.Fatalf("claim %s: %+v, %v", c.Key, res, errors.Join(err))
	}
}
