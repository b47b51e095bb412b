package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// txStore is what the transactional subtests need: the store, the means
// to make and observe a business write in its database, and the target's
// facts about sessions and leases.
type txStore struct {
	Store          idemstore.Transactor
	Write          func(ctx context.Context, tx any, marker string) error
	Count          func(ctx context.Context, marker string) (int, error)
	Exec           func(ctx context.Context, tx any, sql string) error
	SkipLeaseFence string
	Session        []SessionState
	TxClaims       TxClaims
	Crash          func(ctx context.Context, tx idemstore.Tx) error
}

// newTxStore is the txStore of in, a store of target.
func newTxStore(target Target, in Instance, store idemstore.Transactor) txStore {
	return txStore{Store: store, Write: in.Write, Count: in.Count, Exec: in.Exec,
		SkipLeaseFence: target.SkipLeaseFence, Session: target.Session, TxClaims: target.TxClaims, Crash: in.Crash}
}

// loserDeadline bounds how long a losing claim may take while the winner
// holds its transaction open: a loser answers at once, it never waits for
// the winner's handler.
const loserDeadline = time.Second

// RunTx runs the transactional part of the conformance suite. Each subtest
// opens its own store of target, an idemstore.Transactor whose database holds
// the table that Instance.Write and Instance.Count use.
func RunTx(t *testing.T, target Target) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s txStore)
	}{
		{"CommitStoresWriteAndResponse", testTxCommit},
		{"ReleaseRollsBackAndFreesKey", testTxRelease},
		{"LostClaimHasNoTx", testTxLost},
		{"ClaimTxMeetsFailClosedHolder", testTxMeetsFailClosedHolder},
		{"InvalidClaimsAreRefused", testTxInvalidClaims},
		{"PlainClaimMeetsOpenTx", testTxPlainClaimMeetsOpenTx},
		{"HandlerOutlivesLease", testTxHandlerOutlivesLease},
		{"ConcurrentClaimTx", testTxConcurrent},
		{"Begin", testTxBegin},
		{"BeginIsBoundedByItsLease", testTxBeginBoundedByLease},
		{"HandlerCannotEndTx", testTxHandlerCannotEndTx},
		{"HandlerRawCommit", testTxHandlerRawCommit},
		{"HandlerRawRollback", testTxHandlerRawRollback},
		{"BeginHandlerRawEnd", testTxBeginHandlerRawEnd},
		{"OtherRequestMeetsOpenTx", testTxOtherRequestMeetsOpenTx},
		{"ClaimContextEndsEarly", testTxClaimContextEndsEarly},
		{"SessionIsNotShared", testTxSessionIsNotShared},
		{"HandlerChainsTx", testTxHandlerChainsTx},
		{"WaitEndsWhileTxOpen", testTxWaitEnded},
		{"LargeBodyRoundTrip", func(t *testing.T, s txStore) { testLargeBody(t, s.Store, txFinisher(s)) }},
		{"IdentityFieldsStayApart", func(t *testing.T, s txStore) { testIdentityFields(t, s.Store, txFinisher(s)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, store := OpenTx(t, target)
			tc.fn(t, newTxStore(target, in, store))
		})
	}
	onClock := []struct {
		name string
		fn   func(t *testing.T, c clocked, s txStore)
	}{
		{"LeaseFractionHolds", testTxLeaseFraction},
		{"LongTTLOutlivesItsClock", func(t *testing.T, c clocked, s txStore) { testLongTTL(t, c, txFinisher(s)) }},
	}
	for _, tc := range onClock {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := openClocked(t, target)
			store, ok := c.Store.(idemstore.Transactor)
			if !ok {
				t.Fatalf("storetest: the transactional suites need a Store that is an idemstore.Transactor (%T)", c.Store)
			}
			tc.fn(t, c, newTxStore(target, c.Instance, store))
		})
	}
}

// testTxLeaseFraction: a transactional claim's lease of a fraction of a
// second over whole seconds holds for all of it. Where the claim is
// committed before the handler's transaction (TxClaimCommitted), the
// handler's process dies, so that the claim stands alone: a retry 1.2 s
// into a 1.5 s lease (2.2 s into 2.5 s) loses, and one just past it takes
// over, on the test's clock. Where the claim lives in the handler's
// transaction, the lease bounds the transaction itself, by the database's
// own timers: a handler idle 2.1 s into a 2.9 s lease still commits. A
// store that kept the lease in whole seconds would let the retry in, or
// end the transaction, early.
func testTxLeaseFraction(t *testing.T, c clocked, s txStore) {
	ctx := context.Background()
	if s.TxClaims != TxClaimCommitted {
		const lease, idle = 2900 * time.Millisecond, 2100 * time.Millisecond
		r := newRequest("k-fraction")
		r.lease = lease
		tx := mustClaimTx(t, s, r.claim())
		mustWrite(t, s, tx, "fraction")
		time.Sleep(idle)
		if err := tx.Commit(ctx, sampleResponse()); err != nil {
			t.Fatalf("Commit %v into a %v lease: %v", idle, lease, err)
		}
		wantCount(t, s, "fraction", 1)
		return
	}
	if s.Crash == nil {
		t.Skip("the store's test gives no Crash")
	}
	for i, lease := range []time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond} {
		r := newRequest(fmt.Sprintf("k-fraction-%d", i))
		r.lease = lease
		if err := s.Crash(ctx, mustClaimTx(t, s, r.claim())); err != nil {
			t.Fatalf("crash: %v", err)
		}
		c.advance(t, lease-300*time.Millisecond)
		if res := mustClaim(t, s.Store, r.claim()); res.Won {
			t.Errorf("a retry %v into a transactional claim's %v lease won it", lease-300*time.Millisecond, lease)
		}
		c.advance(t, 301*time.Millisecond)
		if res := mustWin(t, s.Store, r.claim()); !res.TookOver {
			t.Errorf("lease %v: the claim just past it won without taking over", lease)
		}
	}
}

func mustClaimTx(t *testing.T, s txStore, c idemstore.Claim) idemstore.Tx {
	t.Helper()
	res, tx, err := s.Store.ClaimTx(context.Background(), c)
	if err != nil {
		t.Fatalf("ClaimTx(%q): %v", c.Key, err)
	}
	if !res.Won || tx == nil {
		releaseTx(tx)
		t.Fatalf("ClaimTx(%q) = won %v, tx %v, existing %+v; want won with a tx", c.Key, res.Won, tx, res.Existing)
	}
	// A test that fails with the transaction open (a broken store) would
	// leave it holding locks that the store's cleanup waits for.
	t.Cleanup(func() {
		if t.Failed() {
			releaseTx(tx)
		}
	})
	if tx.Driver() == nil {
		t.Fatalf("ClaimTx(%q): Driver() is nil", c.Key)
	}
	return tx
}

func mustWrite(t *testing.T, s txStore, tx idemstore.Tx, marker string) {
	t.Helper()
	if err := s.Write(context.Background(), tx.Driver(), marker); err != nil {
		t.Fatalf("business write %q: %v", marker, err)
	}
}

func wantCount(t *testing.T, s txStore, marker string, want int) {
	t.Helper()
	n, err := s.Count(context.Background(), marker)
	if err != nil {
		t.Fatalf("count %q: %v", marker, err)
	}
	if n != want {
		t.Errorf("committed writes of %q = %d, want %d", marker, n, want)
	}
}

func testTxCommit(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "commit")
	want := sampleResponse()
	if err := tx.Commit(ctx, want); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantCount(t, s, "commit", 1)
	rec := mustLose(t, s.Store, r.claim(), idemstore.StateCompleted)
	if rec.Response == nil {
		t.Fatalf("completed record has no response")
	}
	if diff := cmp.Diff(want, *rec.Response); diff != "" {
		t.Errorf("replayed response differs (-want +got):\n%s", diff)
	}
}

func testTxRelease(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "released")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantCount(t, s, "released", 0)

	// The key is free again, for a plain claim and for a transactional one.
	c := r.claim()
	if res := mustWin(t, s.Store, c); res.TookOver {
		t.Errorf("claim after Release reports TookOver")
	}
	if err := s.Store.Release(ctx, c.Identity, c.Token); err != nil {
		t.Fatalf("plain Release: %v", err)
	}
	tx = mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "released")
	if err := tx.Commit(ctx, sampleResponse()); err != nil {
		t.Fatalf("Commit after Release: %v", err)
	}
	wantCount(t, s, "released", 1)
}

// testTxInvalidClaims: ClaimTx refuses what Claim refuses, opens no
// transaction, and leaves the key free.
func testTxInvalidClaims(t *testing.T, s txStore) {
	r := newRequest("k-invalid")
	for name, c := range invalidClaims(r) {
		res, tx, err := s.Store.ClaimTx(context.Background(), c)
		if !errors.Is(err, idemstore.ErrInvalidClaim) || tx != nil {
			t.Errorf("%s: ClaimTx = %+v, tx %v, %v; want no tx and an error wrapping idemstore.ErrInvalidClaim", name, res, tx, err)
		}
	}
	tx := mustClaimTx(t, s, r.claim())
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testTxLost(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	tx := mustClaimTx(t, s, r.claim())
	if err := tx.Commit(ctx, sampleResponse()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	res, tx2, err := s.Store.ClaimTx(ctx, r.claim())
	if err != nil {
		t.Fatalf("second ClaimTx: %v", err)
	}
	if res.Won || tx2 != nil {
		releaseTx(tx2)
		t.Fatalf("second ClaimTx = won %v, tx %v; want lost without a tx", res.Won, tx2)
	}
	if res.Existing.State != idemstore.StateCompleted || res.Existing.Response == nil {
		t.Errorf("second ClaimTx lost to %+v, want the completed record", res.Existing)
	}

	other := r
	other.body = `{"amount":1}`
	res, tx2, err = s.Store.ClaimTx(ctx, other.claim())
	if err != nil {
		t.Fatalf("mismatching ClaimTx: %v", err)
	}
	if res.Won || tx2 != nil {
		releaseTx(tx2)
		t.Fatalf("mismatching ClaimTx won")
	}
}

// releaseTx releases a transaction that a broken store handed out where it
// should have handed out none, so that the failing test does not leave it
// open, holding locks its cleanup waits for.
func releaseTx(tx idemstore.Tx) {
	if tx != nil {
		_ = tx.Rollback(context.Background())
	}
}

// testTxMeetsFailClosedHolder: a durable-mode request commits a plain claim
// that fails closed before its handler writes around its transaction. A
// transactional claim that meets it after its lease, from a process that
// has not seen the handler do so (restarted, or another replica), marks the
// key indeterminate instead of running the request again.
func testTxMeetsFailClosedHolder(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k-durable")
	r.lease, r.mode = shortLease, idemstore.FailClosed
	mustWin(t, s.Store, r.claim())
	time.Sleep(pastLease)
	r.mode = idemstore.Takeover
	res, tx, err := s.Store.ClaimTx(ctx, r.claim())
	if err != nil {
		t.Fatalf("ClaimTx: %v", err)
	}
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if res.Won {
		t.Fatalf("ClaimTx took over a holder that fails closed (TookOver %v): the request runs again", res.TookOver)
	}
	if res.Existing.State != idemstore.StateIndeterminate {
		t.Errorf("ClaimTx lost to %+v, want an indeterminate record", res.Existing)
	}
}

// A plain claim of a key whose transactional claim is open loses at once.
func testTxPlainClaimMeetsOpenTx(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "open")

	start := time.Now()
	mustLose(t, s.Store, r.claim(), idemstore.StateInFlight)
	if d := time.Since(start); d > loserDeadline {
		t.Errorf("losing claim took %v while the tx was open, want under %v", d, loserDeadline)
	}
	if err := tx.Commit(ctx, sampleResponse()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantCount(t, s, "open", 1)
}

// A handler that outlives its lease must not commit once another request
// took the key over: its Commit is fenced and its writes are rolled back.
func testTxHandlerOutlivesLease(t *testing.T, s txStore) {
	if s.SkipLeaseFence != "" {
		t.Skip(s.SkipLeaseFence)
	}
	ctx := context.Background()
	r := newRequest("k1")
	r.lease = shortLease
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "late")
	time.Sleep(pastLease)

	// The retry takes over. A store may have ended the stale transaction
	// already (then the row may be gone and this is a plain win); either way
	// it must not wait for the stale handler.
	r.lease = longLease
	nc := r.claim()
	start := time.Now()
	mustWin(t, s.Store, nc)
	if d := time.Since(start); d > loserDeadline {
		t.Errorf("takeover took %v, want under %v", d, loserDeadline)
	}

	err := tx.Commit(ctx, sampleResponse())
	mustFence(t, "stale handler's Commit", err)
	wantCount(t, s, "late", 0)

	want := sampleResponse()
	want.Status = http.StatusAccepted
	if err := s.Store.Complete(ctx, nc.Identity, nc.Token, want); err != nil {
		t.Fatalf("new holder's Complete: %v", err)
	}
	rec := mustLose(t, s.Store, r.claim(), idemstore.StateCompleted)
	if rec.Response == nil || rec.Response.Status != http.StatusAccepted {
		t.Errorf("replay = %+v, want the new holder's 202", rec.Response)
	}
}

// Several requests race for one key through ClaimTx. One wins and holds its
// transaction for a while; every loser answers promptly, without waiting
// for the winner's handler to finish.
func testTxConcurrent(t *testing.T, s txStore) {
	const claimants = 8
	const hold = 3 * time.Second
	ctx := context.Background()
	r := newRequest("k1")

	type outcome struct {
		won  bool
		took time.Duration
		err  error
	}
	var (
		wg       sync.WaitGroup
		outcomes = make([]outcome, claimants)
	)
	start := make(chan struct{})
	for i := range claimants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			begin := time.Now()
			res, tx, err := s.Store.ClaimTx(ctx, r.claim())
			outcomes[i] = outcome{won: res.Won, took: time.Since(begin), err: err}
			switch {
			case err != nil:
				return
			case res.Won:
				if err := s.Write(ctx, tx.Driver(), "race"); err != nil {
					outcomes[i].err = fmt.Errorf("winner's write: %w", err)
					_ = tx.Rollback(ctx)
					return
				}
				time.Sleep(hold)
				if err := tx.Commit(ctx, sampleResponse()); err != nil {
					outcomes[i].err = fmt.Errorf("winner's Commit: %w", err)
				}
			case tx != nil:
				outcomes[i].err = errors.New("lost ClaimTx returned a tx")
			case res.Existing.State != idemstore.StateInFlight:
				outcomes[i].err = fmt.Errorf("lost to a %q row, want in_flight", res.Existing.State)
			}
		}()
	}
	close(start)
	wg.Wait()

	won := 0
	for i, o := range outcomes {
		if o.err != nil {
			t.Errorf("claimant %d: %v", i, o.err)
		}
		if o.won {
			won++
		} else if o.took > loserDeadline {
			t.Errorf("claimant %d lost after %v, want under %v", i, o.took, loserDeadline)
		}
	}
	if won != 1 {
		t.Errorf("%d claimants won, want exactly 1", won)
	}
	wantCount(t, s, "race", 1)
}

func testTxBegin(t *testing.T, s txStore) {
	ctx := context.Background()
	tx, err := s.Store.Begin(ctx, longLease)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	mustWrite(t, s, tx, "keyless")
	if err := tx.Commit(ctx, sampleResponse()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantCount(t, s, "keyless", 1)

	tx, err = s.Store.Begin(ctx, longLease)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	mustWrite(t, s, tx, "keyless-rolled-back")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantCount(t, s, "keyless-rolled-back", 0)
}

// testTxBeginBoundedByLease: a keyless transaction that outlives its lease
// (its handler hung) is ended by the store: its write is rolled back, its
// Commit fails, and the database is free for other transactions, on SQLite
// whose only write lock it held.
func testTxBeginBoundedByLease(t *testing.T, s txStore) {
	ctx := context.Background()
	hung, err := s.Store.Begin(ctx, shortLease)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	mustWrite(t, s, hung, "hung")
	time.Sleep(pastLease)

	other, err := s.Store.Begin(ctx, longLease)
	if err != nil {
		t.Fatalf("Begin while a transaction past its lease was never ended: %v", err)
	}
	mustWrite(t, s, other, "after")
	if err := other.Commit(ctx, idemstore.Response{}); err != nil {
		t.Fatalf("Commit while a transaction past its lease was never ended: %v", err)
	}
	if err := hung.Commit(ctx, sampleResponse()); err == nil {
		t.Errorf("Commit of a transaction past its lease succeeded")
	}
	wantCount(t, s, "hung", 0)
	wantCount(t, s, "after", 1)
}

// A handler cannot end the transaction it was given: whatever Commit or
// Rollback method the driver value has (database/sql's or pgx's) fails, and
// the store's Commit then commits the write with the completion. A handler
// that could commit on its own made its effect durable while the
// completion failed; the retry after the lease took the key over and the
// effect happened twice.
func testTxHandlerCannotEndTx(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	r.lease = shortLease
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "escape")
	var ended []string
	switch d := tx.Driver().(type) {
	case interface{ Commit() error }:
		if d.Commit() == nil {
			ended = append(ended, "Commit()")
		}
	case interface{ Commit(context.Context) error }:
		if d.Commit(ctx) == nil {
			ended = append(ended, "Commit(ctx)")
		}
	}
	switch d := tx.Driver().(type) {
	case interface{ Rollback() error }:
		if d.Rollback() == nil {
			ended = append(ended, "Rollback()")
		}
	case interface{ Rollback(context.Context) error }:
		if d.Rollback(ctx) == nil {
			ended = append(ended, "Rollback(ctx)")
		}
	}
	if len(ended) > 0 {
		t.Errorf("the handler's %T ended the transaction with %v", tx.Driver(), ended)
	}
	if err := tx.Commit(ctx, sampleResponse()); err != nil {
		t.Errorf("Commit after the handler's attempts: %v", err)
		// What the engine does next: the claim stays in flight, and the
		// client's retry takes it over once the lease has run out.
		time.Sleep(pastLease)
		tx2 := mustClaimTx(t, s, r.claim())
		mustWrite(t, s, tx2, "escape")
		_ = tx2.Commit(ctx, sampleResponse())
	}
	wantCount(t, s, "escape", 1)
}

// rawEnd has the handler end its transaction with a raw statement, after a
// write of marker. A store may refuse the statement: then either the
// transaction is intact, and Commit stores the write once, or the store
// rolls it back for the refused statement, and Commit fails (not with
// idemstore.ErrOutcomeUnknown: nothing was written). If the statement
// ran, the store cannot know what the handler's writes became and must
// never free the key for a takeover. It reports whether the statement ran.
func rawEnd(t *testing.T, s txStore, tx idemstore.Tx, stmt, marker string) bool {
	t.Helper()
	if s.Exec == nil {
		t.Skip("the store's test gives no Exec")
	}
	if s.Exec(context.Background(), tx.Driver(), stmt) == nil {
		return true
	}
	writeAfterRefusal(s, tx, marker)
	wantRefused(t, s, tx.Commit(context.Background(), sampleResponse()), true, stmt, marker)
	return false
}

// afterRefusal marks the write a handler makes after its statement was
// refused.
const afterRefusal = " after the refusal"

// writeAfterRefusal is a handler's write, after its statement that would
// end the transaction was refused, as if nothing had happened. The store
// may refuse it too.
func writeAfterRefusal(s txStore, tx idemstore.Tx, marker string) {
	_ = s.Write(context.Background(), tx.Driver(), marker+afterRefusal)
}

// wantRefused checks the end of a transaction (err, a Commit's when
// commit) whose handler's stmt, after a write of marker, the store
// refused, and after which the handler wrote again (writeAfterRefusal):
// a Commit stores the first write once, or fails, not with
// idemstore.ErrOutcomeUnknown, having rolled it back; a release writes
// nothing. The write after the refusal is in the same transaction: a
// store that ended the transaction at the refused statement would let it
// commit on its own.
func wantRefused(t *testing.T, s txStore, err error, commit bool, stmt, marker string) {
	t.Helper()
	switch {
	case errors.Is(err, idemstore.ErrOutcomeUnknown) || err != nil && !commit:
		t.Errorf("ending the transaction after its handler's %q was refused: %v", stmt, err)
	case commit && err == nil:
		wantCount(t, s, marker, 1)
		if n, cerr := s.Count(context.Background(), marker+afterRefusal); cerr != nil || n > 1 {
			t.Errorf("committed writes of %q = %d, %v; want at most 1", marker+afterRefusal, n, cerr)
		}
	default:
		wantCount(t, s, marker, 0)
		wantCount(t, s, marker+afterRefusal, 0)
	}
}

// wantOutcomeUnknown checks what a store must do after its handler ended the
// transaction: Commit reports idemstore.ErrOutcomeUnknown and the key is
// indeterminate, for the same request and for a takeover.
func wantOutcomeUnknown(t *testing.T, s txStore, tx idemstore.Tx, r request) {
	t.Helper()
	if err := tx.Commit(context.Background(), sampleResponse()); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
		t.Errorf("Commit after the handler ended its transaction = %v, want idemstore.ErrOutcomeUnknown", err)
	}
	mustLose(t, s.Store, r.claimWith(idemstore.Takeover), idemstore.StateIndeterminate)
}

// retryRuns is a retry of r that, if its claim wins, runs the handler
// again: it reports whether it won.
func retryRuns(t *testing.T, s txStore, r request, marker string) bool {
	t.Helper()
	res, tx, err := s.Store.ClaimTx(context.Background(), r.claim())
	if err != nil {
		t.Fatalf("retry's ClaimTx: %v", err)
	}
	if !res.Won {
		return false
	}
	mustWrite(t, s, tx, marker)
	if err := tx.Commit(context.Background(), sampleResponse()); err != nil {
		t.Errorf("retry's Commit: %v", err)
	}
	return true
}

// A handler commits with a raw COMMIT, writes on, and outlives its lease.
// Its effect is durable, so no retry may take the key over, however long
// the handler takes; its Commit leaves the key indeterminate.
func testTxHandlerRawCommit(t *testing.T, s txStore) {
	r := newRequest("k1")
	r.lease = shortLease
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "raw-commit")
	if !rawEnd(t, s, tx, "COMMIT", "raw-commit") {
		return
	}
	time.Sleep(pastLease)
	if retryRuns(t, s, r, "raw-commit") {
		t.Errorf("a retry took the key over from a handler that had committed on its own")
	}
	wantOutcomeUnknown(t, s, tx, r)
	if retryRuns(t, s, r, "raw-commit") {
		t.Errorf("a retry won the key after the handler's Commit")
	}
	wantCount(t, s, "raw-commit", 1)
}

// A handler rolls back with a raw ROLLBACK and writes on outside any
// transaction (its writes commit one by one), while its client retries.
// The retry must not run the handler again.
func testTxHandlerRawRollback(t *testing.T, s txStore) {
	r := newRequest("k1")
	tx := mustClaimTx(t, s, r.claim())
	mustWrite(t, s, tx, "before-rollback")
	if !rawEnd(t, s, tx, "ROLLBACK", "before-rollback") {
		return
	}
	mustWrite(t, s, tx, "after-rollback")
	if retryRuns(t, s, r, "after-rollback") {
		t.Errorf("a concurrent retry won the key of a handler that rolled back on its own and wrote on")
	}
	wantOutcomeUnknown(t, s, tx, r)
	if retryRuns(t, s, r, "after-rollback") {
		t.Errorf("a retry won the key after the handler's Commit")
	}
	wantCount(t, s, "after-rollback", 1)
}

// A handler ends a plain transaction (Begin: a keyless request, or one in
// durable mode) with a raw COMMIT or ROLLBACK and writes on in autocommit.
// What its writes became cannot be known, so Commit must not report them
// committed: it returns an error wrapping idemstore.ErrOutcomeUnknown, and the
// engine never stores the handler's answer as if they were.
func testTxBeginHandlerRawEnd(t *testing.T, s txStore) {
	ctx := context.Background()
	for _, stmt := range []string{"COMMIT", "ROLLBACK"} {
		tx, err := s.Store.Begin(ctx, longLease)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		mustWrite(t, s, tx, "begin-"+stmt)
		if !rawEnd(t, s, tx, stmt, "begin-"+stmt) {
			continue
		}
		if err := tx.Commit(ctx, idemstore.Response{}); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
			t.Errorf("Commit after the handler's raw %s = %v, want idemstore.ErrOutcomeUnknown", stmt, err)
		}
	}
}

// A different request meets a key whose transactional claim is open: it
// loses, and the record it gets is not its own request, so the engine
// answers 422 (docs/semantics.md §3.5), not 409, whatever the row's state.
func testTxOtherRequestMeetsOpenTx(t *testing.T, s txStore) {
	ctx := context.Background()
	r := newRequest("k1")
	r.id.Scope = "" // scope tenant: the operation belongs to the request too
	held := r.claim()
	tx := mustClaimTx(t, s, held)
	defer func() { _ = tx.Rollback(ctx) }()

	body := r
	body.body = `{"amount":1}`
	op := r
	op.operation = "createRefund"
	for name, other := range map[string]request{"fingerprint": body, "operation": op} {
		oc := other.claim()
		for _, transactional := range []bool{false, true} {
			var res idemstore.Result
			var err error
			if transactional {
				var tx2 idemstore.Tx
				res, tx2, err = s.Store.ClaimTx(ctx, oc)
				if tx2 != nil {
					_ = tx2.Rollback(ctx)
				}
			} else {
				res, err = s.Store.Claim(ctx, oc)
			}
			if err != nil {
				t.Fatalf("other %s, transactional %v: %v", name, transactional, err)
			}
			rec := res.Existing
			if res.Won {
				t.Errorf("other %s, transactional %v: won a held key", name, transactional)
			} else if bytes.Equal(rec.Fingerprint, oc.Fingerprint) && rec.Operation == oc.Operation {
				t.Errorf("other %s, transactional %v: lost to a record of its own request (%s %x), want the holder's", name, transactional, rec.Operation, rec.Fingerprint)
			}
		}
	}
	// The holder's own request still meets itself.
	rec := mustLose(t, s.Store, r.claim(), idemstore.StateInFlight)
	if !bytes.Equal(rec.Fingerprint, held.Fingerprint) || rec.Operation != held.Operation {
		t.Errorf("the same request lost to %s %x, want its own record", rec.Operation, rec.Fingerprint)
	}
}

// The context given to ClaimTx bounds the claim only: the transaction it
// opens lives on after that context ends, until Commit or Rollback.
func testTxClaimContextEndsEarly(t *testing.T, s txStore) {
	ctx, cancel := context.WithCancel(context.Background())
	r := newRequest("k1")
	res, tx, err := s.Store.ClaimTx(ctx, r.claim())
	cancel()
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = won %v, err %v", res.Won, err)
	}
	time.Sleep(50 * time.Millisecond)
	mustWrite(t, s, tx, "after-cancel")
	if err := tx.Commit(context.Background(), sampleResponse()); err != nil {
		t.Fatalf("Commit after the claim's context ended: %v", err)
	}
	wantCount(t, s, "after-cancel", 1)
	mustLose(t, s.Store, r.claim(), idemstore.StateCompleted)
}
