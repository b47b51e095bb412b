package sqliteoutbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// backlog is how many effects the runners of
// TestRunnersLeaveRequestClaimsTheirTurn work through: more than they
// deliver while its claims run.
const backlog = 20000

// Two runners working through a backlog with a receiver that answers at
// once write as fast as the write turn lets them, and the requests'
// claims still have it within moments: the runners' writes go behind the
// claims (sqlitestore's BeginTurn). Ahead of them, they kept every claim
// waiting for seconds, and some failed after the claims' lock wait (the
// engine's 503).
func TestRunnersLeaveRequestClaimsTheirTurn(t *testing.T) {
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, newDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stageRaw(t, s, backlog)
	t.Log(claimLatency(t, s, "idle", 200))
	deliver := func(context.Context, idemoutbox.Message) error { return nil }
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ob := sqliteoutbox.New(s, idemoutbox.Options{})
	pending := func() int64 {
		b, err := ob.Backlog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return b.Pending
	}
	for range 2 {
		r, err := idemoutbox.NewRunner(idemoutbox.Config{Store: ob, Deliver: deliver, Poll: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(rctx) })
	}
	time.Sleep(200 * time.Millisecond)
	rate := func(during func()) float64 {
		start, before := time.Now(), pending()
		during()
		return float64(before-pending()) / time.Since(start).Seconds()
	}
	alone := rate(func() { time.Sleep(time.Second) })
	var c latency
	beside := rate(func() { c = claimLatency(t, s, "beside the runners", 100) })
	cancel()
	wg.Wait()
	t.Logf("%v; the runners recorded %.0f deliveries a second alone, %.0f beside the claims", c, alone, beside)
	if c.failed > 0 || c.slowest > time.Second {
		t.Errorf("beside two runners working through a backlog, %d of 100 claims failed and the slowest took %v", c.failed, c.slowest)
	}
}

// stageRaw writes n pending effects into the outbox's table, due now.
func stageRaw(t *testing.T, s *sqlitestore.Store, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli()
	for i := range n {
		if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload, next_attempt_at, created_at)
			VALUES ('t', 's', ?1, ?1, 'receipt', x'00', ?2, ?2)`, fmt.Sprint(i), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// latency is how n claims of new keys, one after another, fared.
type latency struct {
	label           string
	n, failed       int
	median, slowest time.Duration
}

func (l latency) String() string {
	return fmt.Sprintf("%s: %d claims, median %v, slowest %v, %d failed", l.label, l.n, l.median, l.slowest, l.failed)
}

// claimLatency claims and completes n new keys on s, one after another.
func claimLatency(t *testing.T, s *sqlitestore.Store, label string, n int) latency {
	t.Helper()
	ctx := context.Background()
	l := latency{label: label, n: n}
	times := make([]time.Duration, 0, n)
	for i := range n {
		c := idemstore.Claim{Identity: idemstore.Identity{Tenant: "acme", Scope: "op", Key: label + fmt.Sprint(i)},
			Operation: "op", Fingerprint: []byte{1}, Token: "tok" + fmt.Sprint(i), Lease: time.Minute, TTL: time.Hour,
			OnLeaseExpiry: idemstore.Takeover}
		start := time.Now()
		res, err := s.Claim(ctx, c)
		times = append(times, time.Since(start))
		if err != nil || !res.Won {
			l.failed++
			t.Logf("%s: claim %d after %v: won %v, %v", label, i, times[i].Round(time.Millisecond), res.Won, err)
			continue
		}
		if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201}); err != nil {
			t.Errorf("%s: complete %d: %v", label, i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	slices.Sort(times)
	l.median, l.slowest = times[n/2], times[n-1]
	return l
}
