package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// patience is how long the clients of these tests wait, and promptly how
// soon after that a claim must have stopped waiting for the write lock.
const (
	patience = 100 * time.Millisecond
	promptly = 300 * time.Millisecond
)

// holdLock takes SQLite's write lock on a connection of its own, as another
// process or a transactional handler holds it, until the returned function
// is called.
func holdLock(t *testing.T, s *sqlitestore.Store) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	unlock = func() {
		if once.Swap(true) {
			return
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Errorf("ROLLBACK: %v", err)
		}
		_ = conn.Close()
	}
	t.Cleanup(unlock)
	return unlock
}

// testClaim is a claim of key with a one-minute lease.
func testClaim(key string) idemstore.Claim {
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "op", Key: key},
		Operation:     "op",
		Fingerprint:   []byte{1},
		Token:         "tok-" + key,
		Lease:         time.Minute,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.Takeover,
	}
}

// rows counts the rows stored under key.
func rows(t *testing.T, s *sqlitestore.Store, key string) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRow(`SELECT count(*) FROM idempotency_keys WHERE key = ?`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A claim waiting for SQLite's write lock stops waiting when its wait
// context ends (its client hung up), with idemstore.ErrWaitEnded, and
// leaves no row: whether the lock is held by another connection or by a
// transactional handler, and whether the claim waits for SQLite's lock or
// for this process's turn behind another claim that waits for it.
func TestClaimStopsWaitingWhenItsWaitEnds(t *testing.T) {
	plain := func(s *sqlitestore.Store, ctx context.Context, c idemstore.Claim) error {
		_, err := s.Claim(ctx, c)
		return err
	}
	tx := func(s *sqlitestore.Store, ctx context.Context, c idemstore.Claim) error {
		_, tx, err := s.ClaimTx(ctx, c)
		if tx != nil {
			_ = tx.Rollback(context.Background())
		}
		return err
	}
	holders := map[string]func(t *testing.T, s *sqlitestore.Store) func(){
		"another connection": holdLock,
		"a transactional handler": func(t *testing.T, s *sqlitestore.Store) func() {
			_, held, err := s.ClaimTx(context.Background(), testClaim("holder"))
			if err != nil {
				t.Fatal(err)
			}
			return func() { _ = held.Commit(context.Background(), idemstore.Response{Status: 201}) }
		},
	}
	for holder, hold := range holders {
		for name, claim := range map[string]func(*sqlitestore.Store, context.Context, idemstore.Claim) error{"Claim": plain, "ClaimTx": tx} {
			t.Run(name+" behind "+holder, func(t *testing.T) {
				t.Parallel()
				s := openStore(t)
				unlock := hold(t, s)
				// A claim without a wait context waits in front, taking
				// this process's turn again and again.
				ahead := make(chan error, 1)
				go func() { ahead <- plain(s, context.Background(), testClaim("ahead")) }()
				time.Sleep(20 * time.Millisecond)

				wait, cancel := context.WithTimeout(context.Background(), patience)
				defer cancel()
				began := time.Now()
				err := claim(s, idemstore.WithWait(context.Background(), wait), testClaim("k"))
				took := time.Since(began)
				if !errors.Is(err, idemstore.ErrWaitEnded) {
					t.Errorf("claim whose wait ended = %v, want idemstore.ErrWaitEnded", err)
				}
				if took > patience+promptly {
					t.Errorf("claim returned after %v, want within %v of its wait's end", took.Round(time.Millisecond), promptly)
				}
				unlock()
				if err := <-ahead; err != nil {
					t.Errorf("the claim waiting in front: %v", err)
				}
				if n := rows(t, s, "k"); n != 0 {
					t.Errorf("%d rows for the key after the wait ended, want none", n)
				}
				if res, err := s.Claim(context.Background(), testClaim("k")); err != nil || !res.Won {
					t.Errorf("the retry's claim = won %v, %v; want won", res.Won, err)
				}
			})
		}
	}
}

// A won transactional claim released before its handler ran a statement
// (its client left in between, or the handler answered without writing)
// is released inside its own transaction, which holds the write lock
// already: the release does not queue for the lock again, behind the
// writers that came meanwhile. A handler that wrote has its writes rolled
// back first, and the claim released on its own.
func TestTxReleaseKeepsTheLockWhenTheHandlerWroteNothing(t *testing.T) {
	s, log := countingStore(t)
	ctx := context.Background()
	const (
		release  = "DELETE FROM main.idempotency_keys"
		tempSeen = "SELECT count(*) FROM temp.sqlite_schema"
	)
	for _, wrote := range []bool{false, true} {
		_, tx, err := s.ClaimTx(ctx, testClaim(fmt.Sprint("k", wrote)))
		if err != nil {
			t.Fatal(err)
		}
		if wrote {
			if _, err := tx.Driver().(*sqlitestore.Tx).ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('x')`); err != nil {
				t.Fatal(err)
			}
		}
		before := log.Len()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if wrote {
			storetest.CheckStatements(t, "release after a write", log.Since(before),
				[]string{"ROLLBACK", tempSeen, "BEGIN IMMEDIATE", release, "COMMIT"})
		} else {
			storetest.CheckStatements(t, "release before any statement", log.Since(before),
				[]string{release, "COMMIT", tempSeen})
		}
		if res, err := s.Claim(ctx, testClaim(fmt.Sprint("k", wrote))); err != nil || !res.Won {
			t.Errorf("claim after the release (handler wrote: %v) = won %v, %v; want won", wrote, res.Won, err)
		}
	}
	var effects int
	if err := s.DB().QueryRow(`SELECT count(*) FROM effects`).Scan(&effects); err != nil || effects != 0 {
		t.Errorf("%d effects after both releases (%v), want none", effects, err)
	}
}

// Through the engine: a request whose client leaves while its claim waits
// for SQLite's write lock is answered 503 client-gone as soon as it leaves,
// nothing is released (nothing was written), and its retry with the key is
// a first try: it runs the handler and is answered 201, not 409.
func TestEngineAnswersClientGoneWhileTheClaimWaits(t *testing.T) {
	s := openStore(t)
	var runs, gone atomic.Int32
	engine, err := idem.New(idem.Config{
		Store:    s,
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers")},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) {
			if ev.Outcome == idem.OutcomeClientGone {
				gone.Add(1)
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := engine.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(ctx context.Context) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	unlock := holdLock(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	began := time.Now()
	w := send(ctx)
	took := time.Since(began)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "client-gone") {
		t.Errorf("request whose client left while its claim waited: %d %s, want 503 client-gone", w.Code, w.Body)
	}
	if took > patience+promptly {
		t.Errorf("answered after %v, want within %v of the client leaving", took.Round(time.Millisecond), promptly)
	}
	if gone.Load() != 1 {
		t.Errorf("%d requests observed as client-gone, want 1", gone.Load())
	}
	unlock()
	if w := send(context.Background()); w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Errorf("retry: %d %s after %d runs, want 201 from the retry's own run", w.Code, w.Body, runs.Load())
	}
}

// While a claim's handler transaction is open, the claims behind it wait
// for this process's write turn, which the transaction keeps: when it ends,
// the turn goes at once to the claim whose key has waited longest, not to
// whichever claim's poll of SQLite's lock comes first. Here a newer key's
// claim began to wait before the retry of a key whose first claim waited
// and left; the retry goes first.
func TestHandlerTransactionHandsTheTurnToTheLongestWaitingKey(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	_, holder, err := s.ClaimTx(ctx, testClaim("holder"))
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, err := s.ClaimTx(idemstore.WithWait(ctx, gone), testClaim("old")); !errors.Is(err, idemstore.ErrWaitEnded) {
		t.Fatalf("the old key's first claim = %v, want idemstore.ErrWaitEnded", err)
	}

	type won struct {
		key string
		res idemstore.Result
		tx  idemstore.Tx
		err error
	}
	// The claims report over wins, not to t: a test that failed early
	// must not be written to by a claim that ends after it.
	wins := make(chan won, 2)
	claim := func(key string) {
		res, tx, err := s.ClaimTx(ctx, testClaim(key))
		wins <- won{key, res, tx, err}
	}
	go claim("young")
	claimsWait(t, s, 1)
	go claim("old")
	claimsWait(t, s, 2)
	if err := holder.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"old", "young"} {
		w := <-wins
		if w.err != nil || !w.res.Won {
			t.Errorf("claim of %q = won %v, %v; want won", w.key, w.res.Won, w.err)
		}
		if w.key != want {
			t.Errorf("the lock went to %q, want %q", w.key, want)
		}
		if w.tx != nil {
			if err := w.tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Error(err)
			}
		}
	}
}

// claimsWait waits until n claims wait for s's write turn, failing the
// test after a few seconds.
func claimsWait(t *testing.T, s *sqlitestore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for sqlitestore.ClaimsWaiting(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims wait for the write turn, want %d", sqlitestore.ClaimsWaiting(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A handler transaction whose handler hangs keeps the write turn no longer
// than its lease: then the turn passes on, and another claim wins, while
// the hung handler's commit is fenced.
func TestHungHandlerTransactionPassesTheTurnWhenItsLeaseEnds(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	c := testClaim("hung")
	c.Lease = 200 * time.Millisecond
	_, hung, err := s.ClaimTx(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Claim(ctx, testClaim("next")); err != nil || !res.Won {
		t.Fatalf("the claim behind a hung handler = won %v, %v; want won", res.Won, err)
	}
	if err := hung.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrFenced) {
		t.Errorf("the hung handler's commit = %v, want idemstore.ErrFenced", err)
	}
}
