package sqliteoutbox_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
const backlog = 60000

// Two runners working through a backlog with a receiver that answers at
// once write as fast as the write turn lets them, and the requests'
// claims still have it within moments: the runners' writes go behind the
// claims (sqlitestore's BeginTurn). Ahead of them, they kept every claim
// waiting for seconds, and some failed after the claims' lock wait (the
// engine's 503).
func TestRunnersLeaveRequestClaimsTheirTurn(t *testing.T) {
	b := startBusy(t)
	t.Log(claimLatency(t, b.s, "idle", 200))
	b.run()
	alone := b.rate(func() { time.Sleep(time.Second) })
	var c latency
	beside := b.rate(func() { c = claimLatency(t, b.s, "beside the runners", 100) })
	b.stop()
	b.busyThroughout()
	t.Logf("%v; the runners recorded %.0f deliveries a second alone, %.0f beside the claims", c, alone, beside)
	if c.failed > 0 || c.slowest > time.Second {
		t.Errorf("beside two runners working through a backlog, %d of 100 claims failed and the slowest took %v", c.failed, c.slowest)
	}
}

// Under a storm of claims, which always has claims waiting for the write
// turn, the runners still record deliveries: a runner's write that the
// claims have passed over for 100 ms goes ahead of them.
func TestRunnersRecordUnderAStormOfClaims(t *testing.T) {
	b := startBusy(t)
	b.run()
	var failed atomic.Int64
	end := time.Now().Add(2 * time.Second)
	rate := b.rate(func() {
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				for i := 0; time.Now().Before(end); i++ {
					if !claimOnce(t, b.s, fmt.Sprintf("storm-%d-%d", c, i)) {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
	})
	b.stop()
	b.busyThroughout()
	t.Logf("eight clients claiming without pause: %d claims failed; the runners recorded %.0f deliveries a second", failed.Load(), rate)
	if failed.Load() > 0 || rate < 20 {
		t.Errorf("under a storm of claims, %d claims failed and the runners recorded %.0f deliveries a second; want none, and at least 20", failed.Load(), rate)
	}
}

// busy is a store whose outbox holds a backlog, and two runners that
// work through it with a receiver that answers at once.
type busy struct {
	t      *testing.T
	s      *sqlitestore.Store
	ob     *sqliteoutbox.Outbox
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startBusy opens a store with backlog effects staged.
func startBusy(t *testing.T) *busy {
	s, err := sqlitestore.Open(context.Background(), newDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	stageRaw(t, s, backlog)
	return &busy{t: t, s: s, ob: sqliteoutbox.New(s, idemoutbox.Options{})}
}

// run starts the runners, and lets them get going.
func (b *busy) run() {
	var ctx context.Context
	ctx, b.cancel = context.WithCancel(context.Background())
	for range 2 {
		r, err := idemoutbox.NewRunner(idemoutbox.Config{Store: b.ob, Poll: time.Millisecond,
			Deliver: func(context.Context, idemoutbox.Message) error { return nil }})
		if err != nil {
			b.t.Fatal(err)
		}
		b.wg.Go(func() { _ = r.Run(ctx) })
	}
	time.Sleep(200 * time.Millisecond)
}

// stop stops the runners.
func (b *busy) stop() {
	b.cancel()
	b.wg.Wait()
}

// rate is how many deliveries a second the runners recorded during.
func (b *busy) rate(during func()) float64 {
	start, before := time.Now(), b.pending()
	during()
	return float64(before-b.pending()) / time.Since(start).Seconds()
}

// busyThroughout fails the test when the runners ran out of effects to
// deliver, and so measured nothing beside the claims for part of it.
func (b *busy) busyThroughout() {
	if b.pending() == 0 {
		b.t.Fatalf("the runners delivered all %d effects: stage more", backlog)
	}
}

// pending counts the effects not recorded delivered.
func (b *busy) pending() int64 {
	bl, err := b.ob.Backlog(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return bl.Pending
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
	l := latency{label: label, n: n}
	times := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		won := claimOnce(t, s, label+fmt.Sprint(i))
		times = append(times, time.Since(start))
		if !won {
			l.failed++
			continue
		}
		time.Sleep(2 * time.Millisecond)
	}
	slices.Sort(times)
	l.median, l.slowest = times[n/2], times[n-1]
	return l
}

// claimOnce claims a new key on s and completes it, and reports whether
// the claim was won; it logs why not.
func claimOnce(t *testing.T, s *sqlitestore.Store, key string) bool {
	ctx := context.Background()
	c := idemstore.Claim{Identity: idemstore.Identity{Tenant: "acme", Scope: "op", Key: key},
		Operation: "op", Fingerprint: []byte{1}, Token: "tok-" + key, Lease: time.Minute, TTL: time.Hour,
		OnLeaseExpiry: idemstore.Takeover}
	start := time.Now()
	res, err := s.Claim(ctx, c)
	if err != nil || !res.Won {
		t.Logf("claim of %s after %v: won %v, %v", key, time.Since(start).Round(time.Millisecond), res.Won, err)
		return false
	}
	if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201}); err != nil {
		t.Errorf("complete %s: %v", key, err)
	}
	return true
}
