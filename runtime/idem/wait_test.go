package idem_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// waitingStore is a store whose claims wait for a lock that never comes
// free, as an SQLite claim waits behind a long transaction, until the wait
// context the engine gave them ends (idemstore.WithWait). It records
// whether the store context itself was still live then, and counts
// releases.
type waitingStore struct {
	txStore
	storeLive atomic.Bool
	releases  atomic.Int64
}

func (s *waitingStore) wait(ctx context.Context) error {
	wctx, stop := idemstore.WaitContext(ctx)
	defer stop()
	<-wctx.Done()
	s.storeLive.Store(ctx.Err() == nil)
	if idemstore.WaitEnded(wctx) {
		return idemstore.ErrWaitEnded
	}
	return ctx.Err()
}

func (s *waitingStore) Claim(ctx context.Context, _ idemstore.Claim) (idemstore.Result, error) {
	return idemstore.Result{}, s.wait(ctx)
}

func (s *waitingStore) ClaimTx(ctx context.Context, _ idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	return idemstore.Result{}, nil, s.wait(ctx)
}

func (s *waitingStore) Release(ctx context.Context, id idemstore.Identity, token string) error {
	s.releases.Add(1)
	return s.txStore.Release(ctx, id, token)
}

// A claim waits for the store no longer than its client does: when the
// client hangs up, the store stops waiting (its store context lives on, for
// a write already under way) and the request is answered 503 client-gone
// at once, counted under OutcomeClientGone, with no release, since the
// store wrote nothing (docs/semantics.md §7.3). Plain and transactional
// claims alike.
func TestClaimWaitEndsWithItsClient(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		s := &waitingStore{txStore: txStore{memstore.New()}}
		var outcomes []idem.Outcome
		p := pathPolicy("createOrder", "/orders")
		p.Transactional = transactional
		e := newEngine(t, idem.Config{Store: s, StoreTimeout: 5 * time.Second, Policies: []idem.Policy{p},
			Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) { outcomes = append(outcomes, ev.Outcome) })})
		var runs atomic.Int64
		h := e.Middleware(created(&runs))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		began := time.Now()
		w := postFrom(ctx, h, "k")
		took := time.Since(began)
		cancel()
		expect(t, w, http.StatusServiceUnavailable, problem.ClientGone)
		if took > time.Second {
			t.Errorf("transactional %v: answered after %v, want as the client left", transactional, took.Round(time.Millisecond))
		}
		if !s.storeLive.Load() {
			t.Errorf("transactional %v: the store context ended with the client's", transactional)
		}
		if n := s.releases.Load(); n != 0 {
			t.Errorf("transactional %v: %d releases of a claim the store never wrote, want 0", transactional, n)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("transactional %v: the handler ran %d times", transactional, n)
		}
		if len(outcomes) != 1 || outcomes[0] != idem.OutcomeClientGone {
			t.Errorf("transactional %v: outcomes %v, want client-gone", transactional, outcomes)
		}
	}
}
