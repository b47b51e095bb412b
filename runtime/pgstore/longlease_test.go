package pgstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// PostgreSQL's timeouts are whole milliseconds in an int32, about 24.8
// days. A lease longer than that (a policy may hold keys for a month, say
// to never take one over) must be capped before it is sent: PostgreSQL
// refuses a larger timeout, which would fail every transactional claim and
// every keyless transaction with a 503, and the largest Duration must not
// overflow to a 1ms timeout.
func TestLeaseBeyondPostgresTimeouts(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	for _, lease := range []time.Duration{30 * 24 * time.Hour, math.MaxInt64 - 1} {
		c := claimFor("long-"+lease.String(), "tok-"+lease.String(), lease)
		c.TTL = math.MaxInt64
		res, tx, err := s.ClaimTx(ctx, c)
		if err != nil || !res.Won {
			t.Fatalf("ClaimTx with a %v lease: %+v, %v", lease, res, err)
		}
		time.Sleep(5 * time.Millisecond) // idle longer than a 1ms timeout
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatalf("Commit under a %v lease: %v", lease, err)
		}
		btx, err := s.Begin(ctx, lease)
		if err != nil {
			t.Fatalf("Begin with a %v lease: %v", lease, err)
		}
		time.Sleep(5 * time.Millisecond)
		if err := btx.Commit(ctx, idemstore.Response{}); err != nil {
			t.Fatalf("Commit of Begin under a %v lease: %v", lease, err)
		}
	}
}
