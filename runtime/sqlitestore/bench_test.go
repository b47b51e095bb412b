package sqlitestore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

func benchClaim(key, token string) idemstore.Claim {
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "createTransfer", Key: key},
		Operation:     "createTransfer",
		Fingerprint:   make([]byte, 32),
		Token:         token,
		Lease:         time.Minute,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.Takeover,
	}
}

// parallelism makes RunParallel use 8 goroutines whatever GOMAXPROCS is.
func parallelism() int {
	return max(1, 8/runtime.GOMAXPROCS(0))
}

// BenchmarkNewKey measures the path of a new key: Claim, then Complete,
// from 8 goroutines.
func BenchmarkNewKey(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	resp := idemstore.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"tr_1"}`)}
	var n atomic.Int64
	b.SetParallelism(parallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			c := benchClaim(fmt.Sprintf("k%d", i), fmt.Sprintf("tok%d", i))
			res, err := s.Claim(ctx, c)
			if err != nil || !res.Won {
				b.Errorf("claim %d: won %v, err %v", i, res.Won, err)
				return
			}
			if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
				b.Errorf("complete %d: %v", i, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkReplay measures a claim that meets a completed key, from 8
// goroutines: the read-only path.
func BenchmarkReplay(b *testing.B) {
	s := openStore(b)
	ctx := context.Background()
	const keys = 1000
	for i := range keys {
		c := benchClaim(fmt.Sprintf("k%d", i), "tok")
		if _, err := s.Claim(ctx, c); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201, Body: []byte(`{"id":"tr_1"}`)}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.SetParallelism(parallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			res, err := s.Claim(ctx, benchClaim(fmt.Sprintf("k%d", i%keys), "other"))
			if err != nil || res.Won || res.Existing.State != idemstore.StateCompleted {
				b.Errorf("replay: %+v, %v", res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
