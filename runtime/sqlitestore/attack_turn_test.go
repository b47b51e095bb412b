package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/templates"
)

// These tests attack, from outside the package, the write turn a claim's
// handler transaction keeps until it ends (ClaimTx): a handler that calls
// its own store from inside its transaction, two stores on one file, and
// a storm of transactional requests through the engine.

// bounded runs f and fails the test if it has not returned within limit:
// a call that waits for the turn its own caller keeps would hang until
// the lease ran out.
func bounded(t *testing.T, what string, limit time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Errorf("%s hung for %v", what, limit)
		return nil
	}
}

// A handler that, inside its held transaction, calls the same store (a
// claim of another key, a transactional claim, a keyless transaction, a
// completion and a release of another key's claim) cannot be admitted
// while its own transaction keeps the turn and SQLite's lock: each call
// fails within its bounded wait (the lock wait for claims, the completion
// wait for completions and releases, SQLite's busy timeout for Begin)
// instead of hanging until the handler's lease, and a claim of its own
// key loses at once. Once the transaction commits the store serves again.
func TestAttackTurnHandlerCallsItsOwnStore(t *testing.T) {
	s := openStore(t, sqlitestore.WithLockWait(300*time.Millisecond), sqlitestore.WithCompletionWait(600*time.Millisecond))
	ctx := context.Background()
	other := testClaim("other")
	if res, err := s.Claim(ctx, other); err != nil || !res.Won {
		t.Fatalf("claim of other = won %v, %v", res.Won, err)
	}
	held := testClaim("held")
	held.Lease = time.Hour
	_, tx, err := s.ClaimTx(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 15 * time.Second // far past every bounded wait, far short of the lease
	calls := map[string]func() error{
		"Claim": func() error {
			res, err := s.Claim(ctx, testClaim("new"))
			if err == nil && res.Won {
				return errors.New("won")
			}
			return err
		},
		"ClaimTx": func() error {
			res, tx, err := s.ClaimTx(ctx, testClaim("newtx"))
			if tx != nil {
				_ = tx.Rollback(ctx)
			}
			if err == nil && res.Won {
				return errors.New("won")
			}
			return err
		},
		"Begin": func() error {
			tx, err := s.Begin(ctx, time.Minute)
			if tx != nil {
				_ = tx.Rollback(ctx)
				return errors.New("began")
			}
			return err
		},
		"Complete": func() error { return s.Complete(ctx, other.Identity, other.Token, idemstore.Response{Status: 201}) },
		"Release":  func() error { return s.Release(ctx, other.Identity, other.Token) },
	}
	for name, call := range calls {
		began := time.Now()
		err := bounded(t, name+" inside a held transaction", limit, call)
		if err == nil {
			t.Errorf("%s inside a held transaction succeeded after %v, want it to fail its wait", name, time.Since(began))
		} else {
			t.Logf("%s inside a held transaction: %v after %v", name, err, time.Since(began).Round(time.Millisecond))
		}
	}
	if err := bounded(t, "a claim of the held key", limit, func() error {
		res, err := s.Claim(ctx, held)
		if err == nil && (res.Won || res.Existing.State != idemstore.StateInFlight) {
			return fmt.Errorf("claim of the held key: %+v, want it lost, in flight", res)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit after the calls: %v", err)
	}
	if err := s.Complete(ctx, other.Identity, other.Token, idemstore.Response{Status: 201}); err != nil {
		t.Errorf("Complete of other after the commit: %v", err)
	}
	if res, err := s.Claim(ctx, testClaim("new")); err != nil || !res.Won {
		t.Errorf("claim of a new key after the commit = won %v, %v; want won", res.Won, err)
	}
}

// openSecond opens a second store, as a second process would, on the
// database file of path.
func openSecond(t *testing.T, path string, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Two stores on one database file are two processes' turns: a held
// transaction keeps only its own store's turn. The other store's claims,
// transactional claims, completions and releases meet SQLite's lock
// instead, and fail within their bounded waits rather than hang; once the
// transaction ends they succeed, either way round.
func TestAttackTurnTwoStoresOnOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	opts := []sqlitestore.Option{sqlitestore.WithLockWait(300 * time.Millisecond), sqlitestore.WithCompletionWait(600 * time.Millisecond)}
	a := openSecond(t, path, opts...)
	up, _, err := templates.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.DB().ExecContext(ctx, up); err != nil {
		t.Fatal(err)
	}
	b := openSecond(t, path, opts...)
	const limit = 15 * time.Second
	for round, stores := range [][2]*sqlitestore.Store{{a, b}, {b, a}} {
		holder, other := stores[0], stores[1]
		pending := testClaim(fmt.Sprint("pending-", round))
		if res, err := other.Claim(ctx, pending); err != nil || !res.Won {
			t.Fatalf("round %d: claim = won %v, %v", round, res.Won, err)
		}
		_, tx, err := holder.ClaimTx(ctx, testClaim(fmt.Sprint("held-", round)))
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"Claim": func() error {
				res, err := other.Claim(ctx, testClaim(fmt.Sprint("new-", round)))
				if err == nil && res.Won {
					return errors.New("won")
				}
				return err
			},
			"ClaimTx": func() error {
				res, tx, err := other.ClaimTx(ctx, testClaim(fmt.Sprint("newtx-", round)))
				if tx != nil {
					_ = tx.Rollback(ctx)
				}
				if err == nil && res.Won {
					return errors.New("won")
				}
				return err
			},
			"Complete": func() error {
				return other.Complete(ctx, pending.Identity, pending.Token, idemstore.Response{Status: 201})
			},
		}
		for name, call := range calls {
			if err := bounded(t, name+" of the other store", limit, call); err == nil {
				t.Errorf("round %d: %s of the other store succeeded while the write lock was held", round, name)
			}
		}
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatalf("round %d: Commit: %v", round, err)
		}
		if err := other.Complete(ctx, pending.Identity, pending.Token, idemstore.Response{Status: 201}); err != nil {
			t.Errorf("round %d: Complete after the commit: %v", round, err)
		}
		res, tx2, err := other.ClaimTx(ctx, testClaim(fmt.Sprint("newtx-", round)))
		if err != nil || !res.Won {
			t.Fatalf("round %d: ClaimTx after the commit = won %v, %v; want won", round, res.Won, err)
		}
		if err := tx2.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Errorf("round %d: Commit of the other store: %v", round, err)
		}
	}
}

// Two stores on one file race transactional claims of the same keys, each
// from many goroutines, for a while: every key is won at most once and
// committed at most once, every call returns (won, lost, or a bounded
// lock-wait failure), and both stores serve a new key afterwards.
func TestAttackTurnTwoStoresRaceTheSameKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	a := openSecond(t, path)
	up, _, err := templates.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.DB().ExecContext(ctx, up+`; CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	b := openSecond(t, path)
	const keys, workers = 40, 6
	var wins, commits [keys]atomic.Int32
	var failures atomic.Int32
	var wg sync.WaitGroup
	for _, s := range []*sqlitestore.Store{a, b} {
		for w := range workers {
			wg.Go(func() {
				for i := range keys {
					k := (i + w*7) % keys
					res, tx, err := s.ClaimTx(ctx, testClaim(fmt.Sprint("race-", k)))
					switch {
					case err != nil:
						failures.Add(1)
						continue
					case !res.Won:
						continue
					}
					wins[k].Add(1)
					if _, err := tx.Driver().(*sqlitestore.Tx).ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, fmt.Sprint("race-", k)); err != nil {
						t.Errorf("write: %v", err)
					}
					time.Sleep(time.Millisecond)
					if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
						t.Errorf("Commit: %v", err)
						continue
					}
					commits[k].Add(1)
				}
			})
		}
	}
	if err := bounded(t, "the race", 90*time.Second, func() error { wg.Wait(); return nil }); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		var effects int
		if err := a.DB().QueryRow(`SELECT count(*) FROM effects WHERE marker = ?`, fmt.Sprint("race-", k)).Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if wins[k].Load() > 1 || commits[k].Load() != int32(effects) || effects > 1 {
			t.Errorf("key %d: won %d times, committed %d, %d effects; want at most once each, agreeing", k, wins[k].Load(), commits[k].Load(), effects)
		}
	}
	t.Logf("%d claims failed their lock wait", failures.Load())
	for i, s := range []*sqlitestore.Store{a, b} {
		if res, err := s.Claim(ctx, testClaim(fmt.Sprint("after-", i))); err != nil || !res.Won {
			t.Errorf("store %d after the race: claim = won %v, %v; want won", i, res.Won, err)
		}
	}
}

// stormKind is what the storm's handler does for a key.
func stormKind(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % 5)
}

// Through the engine in transactional mode on one store: many goroutines
// send many keys, each key several times at once. The handler writes its
// effect in its transaction and then answers 201, sleeps first, panics,
// answers 503, or outlives its client (whose request is cut off while the
// handler sleeps). Every request is answered within a generous bound; no
// key's effect is ever written twice; a panic's and a 503's effects are
// rolled back; every key whose handler answered 201 ran once and is
// replayed with one effect; and the store serves a new key promptly
// afterwards.
func TestAttackTurnEngineStorm(t *testing.T) {
	s := openStore(t)
	var runs sync.Map // key -> *atomic.Int32
	h := attackEngineLease(t, s, 5*time.Second, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		key := r.Header.Get("Idempotency-Key")
		n, _ := runs.LoadOrStore(key, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		kind := stormKind(key)
		if kind == 1 || kind == 4 {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := tx.ExecContext(context.Background(), `INSERT INTO effects (marker) VALUES (?)`, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch kind {
		case 2:
			panic("storm handler panics")
		case 3:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(key string, hangUp bool) int {
		ctx := context.Background()
		if hangUp {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
		}
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const keys, copies, workers = 60, 3, 12
	type job struct {
		key    string
		hangUp bool
	}
	jobs := make(chan job)
	codes := make(map[int]int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				code := send(j.key, j.hangUp)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	feed := func() error {
		for k := range keys {
			key := fmt.Sprint("storm-", k)
			for c := range copies {
				// The copies of a key go out together, to race each other.
				jobs <- job{key, stormKind(key) == 4 && c == 0}
			}
		}
		close(jobs)
		wg.Wait()
		return nil
	}
	if err := bounded(t, "the storm", 120*time.Second, feed); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("answers: %v", codes)
	total := 0
	for _, n := range codes {
		total += n
	}
	mu.Unlock()
	if total != keys*copies {
		t.Errorf("%d answers, want %d", total, keys*copies)
	}
	// Every key once more, one at a time: a stored answer is replayed,
	// anything else runs again.
	for k := range keys {
		key := fmt.Sprint("storm-", k)
		code := send(key, false)
		effects := countMarker(t, s, key)
		kind := stormKind(key)
		switch {
		case effects > 1:
			t.Errorf("%s (kind %d): %d effects, want at most one", key, kind, effects)
		case (kind == 2 || kind == 3) && effects != 0:
			t.Errorf("%s (kind %d): %d effects of a rolled-back handler", key, kind, effects)
		case (kind == 0 || kind == 1 || kind == 4) && (code != http.StatusCreated || effects != 1):
			t.Errorf("%s (kind %d): after the storm %d with %d effects, want 201 with one", key, kind, code, effects)
		}
		if n, ok := runs.Load(key); ok && kind != 2 && kind != 3 && n.(*atomic.Int32).Load() != 1 {
			t.Errorf("%s (kind %d): the handler ran %d times, want once (its answer is stored)", key, kind, n.(*atomic.Int32).Load())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if res, err := s.Claim(ctx, testClaim("after the storm")); err != nil || !res.Won {
		t.Errorf("claim after the storm = won %v, %v; want won", res.Won, err)
	}
}
