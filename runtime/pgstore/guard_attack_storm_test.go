package pgstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A storm: workers of several stores claim the same keys at once, run the
// handler when they win and retry while the key is in flight, until every
// key is settled. Whatever the handlers and the faults do, a key never has
// two live executions, its effect happens once, and once every request
// has ended a fresh claim of each key, from each store, is answered from
// the row (completed or indeterminate), never "in flight".
type storm struct {
	stores  []*pgstore.Store
	pool    *pgxpool.Pool
	keys    []string
	workers int // per store
	// hostile is the share of winners whose handler ends its transaction
	// with a raw ROLLBACK, drops its session's advisory locks and writes
	// its effect in autocommit.
	hostile float64
	// release is the share of winners that answer with a status that is
	// not stored: their writes roll back and the key is free again.
	release float64
	// cancel is the share of claims whose context ends after a few
	// hundred microseconds, mid-claim.
	cancel float64
	// fault, when set, runs alongside the workers until they are done.
	fault func(ctx context.Context)
	// hold, when set, runs in each winner's handler first, while the
	// winner holds the key and its guard.
	hold func()

	live                                 []atomic.Int32
	wins, busy, errs, doubles, unsettled atomic.Int64
}

// stormDeadline bounds a storm; a worker still retrying a key then reports
// it stuck.
const stormDeadline = 90 * time.Second

func (st *storm) run(t *testing.T) {
	t.Helper()
	st.live = make([]atomic.Int32, len(st.keys))
	faultCtx, stopFault := context.WithCancel(context.Background())
	var faultDone sync.WaitGroup
	if st.fault != nil {
		faultDone.Go(func() { st.fault(faultCtx) })
	}
	deadline := time.Now().Add(stormDeadline)
	var wg sync.WaitGroup
	for si, s := range st.stores {
		for w := range st.workers {
			wg.Go(func() { st.worker(t, s, rand.New(rand.NewPCG(uint64(si), uint64(w))), deadline) })
		}
	}
	wg.Wait()
	stopFault()
	faultDone.Wait()
	t.Logf("%d keys, %d stores x %d workers: %d wins, %d in-flight answers, %d claim errors",
		len(st.keys), len(st.stores), st.workers, st.wins.Load(), st.busy.Load(), st.errs.Load())
	if n := st.doubles.Load(); n > 0 {
		t.Errorf("%d executions started while another of the same key was live", n)
	}
	if n := st.unsettled.Load(); n > 0 {
		t.Errorf("%d keys never settled within %v", n, stormDeadline)
	}
	for _, key := range st.keys {
		if n, err := countEffects(context.Background(), st.pool, key); err != nil || n != 1 {
			t.Errorf("effects of %s = %d, %v; want 1", key, n, err)
		}
	}
	st.checkLiveness(t)
}

// worker settles each key in turn, in an order of its own.
func (st *storm) worker(t *testing.T, s *pgstore.Store, rng *rand.Rand, deadline time.Time) {
	for _, i := range rng.Perm(len(st.keys)) {
		for !st.attempt(t, s, rng, i) {
			if time.Now().After(deadline) {
				st.unsettled.Add(1)
				return
			}
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Microsecond)
		}
	}
}

// attempt claims key i once and reports whether the key is settled.
func (st *storm) attempt(t *testing.T, s *pgstore.Store, rng *rand.Rand, i int) bool {
	key := st.keys[i]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if rng.Float64() < st.cancel {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(1500))*time.Microsecond)
	}
	res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-"+randomHex(4), time.Minute))
	cancel()
	switch {
	case err != nil:
		st.errs.Add(1)
		return false
	case !res.Won:
		switch res.Existing.State {
		case idemstore.StateCompleted, idemstore.StateIndeterminate:
			return true
		}
		st.busy.Add(1)
		return false
	}
	st.wins.Add(1)
	if st.live[i].Add(1) > 1 {
		st.doubles.Add(1)
	}
	ended := sync.OnceFunc(func() { st.live[i].Add(-1) })
	defer ended()
	if st.hold != nil {
		st.hold()
	}
	ctx = context.Background()
	ptx := pgstore.Unchecked(tx)
	switch r := rng.Float64(); {
	case r < st.hostile:
		if err := dropKeyLocks(ctx, tx); err != nil {
			t.Errorf("hostile handler: %v", err)
		}
		if err := writeEffect(ctx, ptx, key); err != nil {
			t.Errorf("hostile handler's write: %v", err)
		}
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
			t.Errorf("Commit after a hostile handler = %v, want outcome unknown", err)
		}
		return true
	case r < st.hostile+st.release:
		if err := writeEffect(ctx, ptx, key); err != nil {
			t.Errorf("handler's write: %v", err)
		}
		// The execution is over once its ROLLBACK has run, which lets the
		// key's own locks go in the same round trip; Rollback then resets
		// the session, a round trip or two more, and only then lets the
		// guard go. A guard whose session was terminated holds nothing
		// meanwhile, and another claim may win the key after this
		// execution, before Rollback returns.
		ended()
		if err := tx.Rollback(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		return false
	}
	if err := writeEffect(ctx, ptx, key); err != nil {
		t.Errorf("handler's write: %v", err)
	}
	time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Errorf("Commit: %v", err)
		return false
	}
	return true
}

// checkLiveness claims every key afresh from every store: each must be
// answered from its row.
func (st *storm) checkLiveness(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for si, s := range st.stores {
		for _, key := range st.keys {
			res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-final", time.Minute))
			switch {
			case err != nil:
				t.Errorf("store %d: final claim of %s: %v", si, key, err)
			case res.Won:
				_ = tx.Rollback(ctx)
				t.Errorf("store %d: final claim of the settled key %s won", si, key)
			case res.Existing.State != idemstore.StateCompleted && res.Existing.State != idemstore.StateIndeterminate:
				t.Errorf("store %d: final claim of %s met %q: the key is stuck", si, key, res.Existing.State)
			}
		}
	}
}

func stormKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "storm-" + randomHex(6)
	}
	return keys
}

// Storms of transactional claims from two stores on separate pools, with
// handlers that commit, release, or escape their transaction and drop their
// locks; with claims cancelled mid-way; and from one store alone.
func TestGuardAttackStorm(t *testing.T) {
	cases := map[string]struct {
		stores                   int
		hostile, release, cancel float64
		idleClose                bool
	}{
		"two stores":                 {stores: 2, release: 0.2},
		"two stores, hostile":        {stores: 2, hostile: 0.3, release: 0.2},
		"two stores, cancelled":      {stores: 2, release: 0.2, cancel: 0.3},
		"one store":                  {stores: 1, release: 0.2},
		"one store, hostile":         {stores: 1, hostile: 0.3, release: 0.2},
		"one store, hostile, cancel": {stores: 1, hostile: 0.3, release: 0.2, cancel: 0.3},
		// The guard's connection closes as soon as it holds nothing, so
		// closing races with new locks all the time.
		"two stores, idle close": {stores: 2, hostile: 0.2, release: 0.2, idleClose: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			schema := newSchema(t)
			st := &storm{keys: stormKeys(16), workers: 6, hostile: c.hostile, release: c.release, cancel: c.cancel}
			for range c.stores {
				pool := openPool(t, schema, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
				s := pgstore.New(pool)
				if c.idleClose {
					pgstore.SetGuardIdleClose(s, time.Microsecond)
				}
				st.stores = append(st.stores, s)
				st.pool = pool
			}
			if c.stores == 1 {
				st.workers = 12
			}
			st.run(t)
		})
	}
}

// The guard's connection terminated again and again while two stores
// claim the same keys: claims fail (the engine answers 503) but none runs
// twice, nothing hangs, and every key settles and is answered from its row.
func TestGuardAttackStormGuardConnectionKilled(t *testing.T) {
	schema := newSchema(t)
	app := "guardkill_" + randomHex(4)
	st := &storm{keys: stormKeys(16), workers: 6, release: 0.2, cancel: 0.1}
	for range 2 {
		pool := openPool(t, schema, func(cfg *pgxpool.Config) {
			cfg.MaxConns = 4
			cfg.ConnConfig.RuntimeParams["application_name"] = app
		})
		st.stores = append(st.stores, pgstore.New(pool))
		st.pool = pool
	}
	var kills atomic.Int64
	// The storm can be over before the fault has met a guard, faster than
	// one turn of the fault's query on a loaded machine: the first
	// winners hold their keys, and so their guards, until a guard's
	// session has been terminated. The fault has a pool of its own, which
	// the held winners do not fill.
	gate, killed := context.WithTimeout(context.Background(), 10*time.Second)
	defer killed()
	st.hold = func() { <-gate.Done() }
	admin := openPool(t, schema)
	st.fault = func(ctx context.Context) {
		for ctx.Err() == nil {
			// Only the guards' sessions hold two-int advisory locks
			// other than the claims' badges.
			var n int64
			err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(a.pid))
				  FROM pg_stat_activity a
				 WHERE a.application_name = $1
				   AND a.pid IN (SELECT pid FROM pg_locks
				                  WHERE locktype = 'advisory' AND objsubid = 2
				                    AND classid <> $2::bigint::oid)`, app, int64(badgeClass)).Scan(&n)
			if err == nil && n > 0 {
				kills.Add(n)
				killed()
			}
			select {
			case <-ctx.Done():
			case <-time.After(3 * time.Millisecond):
			}
		}
	}
	st.run(t)
	t.Logf("guard sessions terminated: %d", kills.Load())
	if kills.Load() == 0 {
		t.Errorf("no guard session was terminated: the storm tested nothing")
	}
}

// Claims of a fresh key at the same moment: one may win the key's row
// while another took its guard first; the winner then asks for the guard
// again for about a quarter of a second, and gives up (409) if the loser
// has not let go by then. All then answer 409 and nobody runs: a liveness
// cost, whose rate this measures under load (many keys at once). Never may
// two win, and the key must be free again right after.
func TestGuardAttackConcurrentClaimsAllGiveUp(t *testing.T) {
	cases := []struct {
		name                 string
		stores, claims, keys int
	}{
		{"pairs, two stores", 2, 2, 16},
		{"pairs, one store", 1, 2, 16},
		{"eight claims, two stores", 2, 8, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schema := newSchema(t)
			// A winner holds its connection until every claim of its key
			// has answered: a pool must have room for a whole round.
			const rounds = 20
			keys := c.keys
			var stores []*pgstore.Store
			for range c.stores {
				stores = append(stores, pgstore.New(openPool(t, schema, func(cfg *pgxpool.Config) {
					cfg.MaxConns = int32(keys * c.claims / c.stores)
				})))
			}
			var none, several, errs atomic.Int64
			for range rounds {
				var wg sync.WaitGroup
				for range keys {
					wg.Go(func() {
						n, e := claimAtOnce(t, stores, c.claims, "rush-"+randomHex(6))
						switch {
						case n == 0 && e == 0:
							none.Add(1)
						case n > 1:
							several.Add(1)
						}
						errs.Add(int64(e))
					})
				}
				wg.Wait()
			}
			t.Logf("%d keys claimed %d times at once: %d with no winner and no error (all 409), %d with several winners, %d claim errors",
				rounds*keys, c.claims, none.Load(), several.Load(), errs.Load())
			if several.Load() > 0 {
				t.Errorf("%d keys had several winners", several.Load())
			}
		})
	}
}

// claimAtOnce claims key n times at once, from the stores in turn, and
// returns how many claims won and how many failed. Winners commit once
// every claim has answered; when none won, a fresh claim must win at once.
func claimAtOnce(t *testing.T, stores []*pgstore.Store, n int, key string) (won, failed int) {
	ctx := context.Background()
	start := make(chan struct{})
	txs := make([]idemstore.Tx, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-"+randomHex(4), time.Minute))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failed++
			case res.Won:
				won++
				txs[i] = tx
			}
		})
	}
	close(start)
	wg.Wait()
	for _, tx := range txs {
		if tx != nil {
			if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Errorf("Commit of %s: %v", key, err)
			}
		}
	}
	if won == 0 && failed == 0 {
		// The key is free: a retry wins, as soon as the claims that gave up
		// have let go of their guards. Under load (the race detector, a
		// busy machine) that can take longer than one retry, as a
		// client's retries allow; nothing else may answer meanwhile.
		deadline := time.Now().Add(5 * time.Second)
		for {
			res, tx, err := stores[0].ClaimTx(ctx, claimFor(key, "tok-after", time.Minute))
			if err == nil && res.Won {
				if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
					t.Errorf("Commit of %s: %v", key, err)
				}
				break
			}
			if err != nil || res.Existing.State != idemstore.StateInFlight || time.Now().After(deadline) {
				t.Errorf("a retry of %s after all gave up = %+v, %v; want won within 5 s", key, res, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return won, failed
}

// badgeClass is the first key of the claims' badges.
var badgeClass, _ = pgstore.RequestBadge(idemstore.Claim{})
