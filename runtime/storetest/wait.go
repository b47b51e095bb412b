package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// waitBound is how long a claim may take once its wait context has ended:
// a store that waits (for a lock, a turn, a connection) stops promptly.
const waitBound = 500 * time.Millisecond

// endedWait is a store context carrying a wait context that has ended
// already (idemstore.WithWait), as a claim's is once its client hung up.
func endedWait() context.Context {
	wait, cancel := context.WithCancel(context.Background())
	cancel()
	return idemstore.WithWait(context.Background(), wait)
}

// wantClaimedOrNothing checks the two answers a claim under an ended wait
// may give: won, or an error wrapping idemstore.ErrWaitEnded after which
// the key is free for the next claim, since nothing was written.
func wantClaimedOrNothing(t *testing.T, s idemstore.Store, r request, won bool, err error) {
	t.Helper()
	switch {
	case err == nil && won:
	case errors.Is(err, idemstore.ErrWaitEnded):
		mustWin(t, s, r.claim())
	default:
		t.Fatalf("claim under an ended wait = won %v, err %v; want won, or idemstore.ErrWaitEnded", won, err)
	}
}

// testWaitEnded: a claim whose wait context has ended either has nothing
// to wait for and is made, or stops with idemstore.ErrWaitEnded having
// written nothing. A live wait context changes nothing.
func testWaitEnded(t *testing.T, s idemstore.Store) {
	r := newRequest("k1")
	res, err := s.Claim(endedWait(), r.claim())
	wantClaimedOrNothing(t, s, r, res.Won, err)

	wait, cancel := context.WithCancel(context.Background())
	defer cancel()
	if res, err := s.Claim(idemstore.WithWait(context.Background(), wait), newRequest("k2").claim()); err != nil || !res.Won {
		t.Fatalf("claim under a live wait = won %v, err %v; want won", res.Won, err)
	}
}

// testTxWaitEnded: while a handler's transaction is open, a claim of
// another key, plain or transactional, whose wait context ends returns
// within waitBound of that end: won, where the open transaction does not
// stand in its way, or idemstore.ErrWaitEnded having written nothing, so
// that the key is free once the open transaction has ended.
func testTxWaitEnded(t *testing.T, s txStore) {
	ctx := context.Background()
	holder := mustClaimTx(t, s, newRequest("held").claim())
	mustWrite(t, s, holder, "held")

	plain, txr := newRequest("plain"), newRequest("tx")
	var plainWon, txWon bool
	var plainErr, txErr error
	waitFor(t, func(ctx context.Context) {
		var res idemstore.Result
		res, plainErr = s.Store.Claim(ctx, plain.claim())
		plainWon = res.Won
	})
	waitFor(t, func(ctx context.Context) {
		var res idemstore.Result
		var tx idemstore.Tx
		res, tx, txErr = s.Store.ClaimTx(ctx, txr.claim())
		txWon = res.Won
		if tx != nil {
			if err := tx.Rollback(context.Background()); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	})
	if err := holder.Commit(ctx, sampleResponse()); err != nil {
		t.Fatalf("Commit of the open transaction: %v", err)
	}
	wantClaimedOrNothing(t, s.Store, plain, plainWon, plainErr)
	wantClaimedOrNothing(t, s.Store, txr, txWon, txErr)
}

// waitFor runs claim under a store context whose wait ends after 100 ms,
// and fails the test unless claim returns within waitBound of that end.
func waitFor(t *testing.T, claim func(ctx context.Context)) {
	t.Helper()
	wait, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	claim(idemstore.WithWait(context.Background(), wait))
	end, _ := wait.Deadline()
	if late := time.Since(end); late > waitBound {
		t.Errorf("the claim returned %v after its wait ended, want within %v", late.Round(time.Millisecond), waitBound)
	}
}
