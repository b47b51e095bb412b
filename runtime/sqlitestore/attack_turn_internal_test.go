package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// These tests attack the write turn that a claim's handler transaction
// keeps until it ends (ClaimTx): on every way a held transaction can end,
// the turn must be passed on exactly once, neither kept (a leak: every
// later writer of the process waits its whole lock wait) nor passed twice
// (two writers admitted at once).

// turnStore opens a store on a new database file, with the schema and a
// table of effects.
func turnStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "idem.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return s
}

// turnClaim is a claim of key with the given lease.
func turnClaim(key string, lease time.Duration) idemstore.Claim {
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "op", Key: key},
		Operation:     "op",
		Fingerprint:   []byte{1},
		Token:         "tok-" + key,
		Lease:         lease,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.Takeover,
	}
}

// turnState reports whether s's write turn is held and how many writers
// wait for it.
func turnState(s *Store) (held bool, waiting int) {
	s.writers.mu.Lock()
	defer s.writers.mu.Unlock()
	return s.writers.held, s.writers.writes.Len() + s.writers.claims.Len() + s.writers.background.Len()
}

// turnIdle fails the test unless s's write turn becomes free, with no
// writer waiting, within a few seconds: a turn kept by a transaction that
// ended is a leak.
func turnIdle(t *testing.T, s *Store, after string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		held, waiting := turnState(s)
		if !held && waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: the write turn is still held (%v) with %d waiting, want it free", after, held, waiting)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// queueTwo queues two writers for s's turn, which someone else holds (it
// fails the test if either is admitted before both are queued): claims of
// keys of their own when claims is set, other writes otherwise. Each,
// once admitted, stays a while and counts itself inside. The returned
// function waits for both and reports the most that were inside at once:
// 2 means the turn was passed twice.
func queueTwo(t *testing.T, s *Store, claims bool) (most func() int32) {
	t.Helper()
	var inside, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var id *idemstore.Identity
			if claims {
				id = &idemstore.Identity{Tenant: "t", Scope: "op", Key: fmt.Sprint("queued-", i)}
			}
			give, err := s.writers.take(context.Background(), 20*time.Second, id)
			if err != nil {
				t.Errorf("queued writer %d: %v", i, err)
				return
			}
			n := inside.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
			inside.Add(-1)
			give()
		}()
		// Queue them one after the other, so that their order is known.
		deadline := time.Now().Add(3 * time.Second)
		for !queued(s, claims, i) {
			if peak.Load() > 0 || time.Now().After(deadline) {
				t.Fatalf("queued writer %d was admitted at once (or never queued): the turn was free", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return func() int32 {
		wg.Wait()
		return peak.Load()
	}
}

// queued reports whether queueTwo's writer i waits for the turn: a claim
// of its key is remembered as waiting, a write is the i+1st write queued.
func queued(s *Store, claims bool, i int) bool {
	s.writers.mu.Lock()
	defer s.writers.mu.Unlock()
	if !claims {
		return s.writers.writes.Len() >= i+1
	}
	_, ok := s.writers.seen[idemstore.Identity{Tenant: "t", Scope: "op", Key: fmt.Sprint("queued-", i)}]
	return ok
}

// claimWaits waits until a claim of key is remembered as waiting for s's
// turn, failing the test after a few seconds.
func claimWaits(t *testing.T, s *Store, key string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s.writers.mu.Lock()
		_, ok := s.writers.seen[turnClaim(key, time.Minute).Identity]
		s.writers.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim of %q never queued for the turn", key)
		}
		time.Sleep(time.Millisecond)
	}
}

// passedOnce queues two writers (claims or other writes) for s's turn,
// which a transaction holds, then ends the transaction and checks that
// the turn was passed on exactly once: to one queued writer at a time,
// and free afterwards (afterwards).
func passedOnce(t *testing.T, s *Store, claims bool, path string, end func()) {
	t.Helper()
	most := queueTwo(t, s, claims)
	end()
	if n := most(); n != 1 {
		t.Errorf("%s: %d queued writers held the turn at once, want 1", path, n)
	}
	afterwards(t, s, path)
}

// afterwards checks that s serves a new key once the turn is idle: its
// claim wins, well within the lock wait.
func afterwards(t *testing.T, s *Store, path string) {
	t.Helper()
	turnIdle(t, s, path)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	key := "after " + path
	res, err := s.Claim(ctx, turnClaim(key, time.Minute))
	if err != nil || !res.Won {
		t.Errorf("%s: a new key's claim = won %v, %v; want won", path, res.Won, err)
	}
	if err := s.Release(ctx, turnClaim(key, time.Minute).Identity, turnClaim(key, time.Minute).Token); err != nil {
		t.Errorf("%s: release of the new key: %v", path, err)
	}
	turnIdle(t, s, path+", then a claim and a release")
}

// Every way a held transaction ends passes the write turn on exactly
// once: committed, with and without writes, with a context already ended,
// twice, after its lease ran out (the lease's AfterFunc and Commit both
// pass it), released before and after a statement, with an ended context
// (releaseInside fails and the release goes the other way), after its
// lease, crashed, and never ended at all (the lease passes it). Two
// writers queued behind the transaction are admitted one at a time, and
// afterwards the turn is free and a new key's claim wins.
func TestAttackTurnEveryEndPassesTheTurnOnce(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	write := func(t *testing.T, tx idemstore.Tx) {
		if _, err := tx.Driver().(*Tx).ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('x')`); err != nil {
			t.Fatal(err)
		}
	}
	resp := idemstore.Response{Status: 201}
	type path struct {
		lease time.Duration
		end   func(t *testing.T, tx idemstore.Tx) // what happens after the writers queue
	}
	paths := map[string]path{
		"commit": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := tx.Commit(ctx, resp); err != nil {
				t.Errorf("Commit: %v", err)
			}
		}},
		"commit after a write": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			write(t, tx)
			if err := tx.Commit(ctx, resp); err != nil {
				t.Errorf("Commit: %v", err)
			}
		}},
		"commit under an ended context": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			write(t, tx)
			if err := tx.Commit(ended, resp); err == nil {
				t.Errorf("Commit under an ended context succeeded")
			}
		}},
		"commit twice": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := tx.Commit(ctx, resp); err != nil {
				t.Errorf("Commit: %v", err)
			}
			if err := tx.Commit(ctx, resp); err == nil {
				t.Errorf("second Commit succeeded")
			}
		}},
		"commit, then release": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := tx.Commit(ctx, resp); err != nil {
				t.Errorf("Commit: %v", err)
			}
			_ = tx.Rollback(ctx)
		}},
		"commit after the lease": {300 * time.Millisecond, func(t *testing.T, tx idemstore.Tx) {
			time.Sleep(600 * time.Millisecond)
			if err := tx.Commit(ctx, resp); !errors.Is(err, idemstore.ErrFenced) {
				t.Errorf("Commit after the lease = %v, want ErrFenced", err)
			}
		}},
		"commit as the lease ends": {250 * time.Millisecond, func(t *testing.T, tx idemstore.Tx) {
			time.Sleep(240 * time.Millisecond)
			_ = tx.Commit(ctx, resp)
		}},
		"release before any statement": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}},
		"release after a write": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			write(t, tx)
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}},
		"release under an ended context": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			_ = tx.Rollback(ended)
		}},
		"release after a write under an ended context": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			write(t, tx)
			_ = tx.Rollback(ended)
		}},
		"release after the lease": {300 * time.Millisecond, func(t *testing.T, tx idemstore.Tx) {
			write(t, tx)
			time.Sleep(600 * time.Millisecond)
			_ = tx.Rollback(ctx)
		}},
		"release twice": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			_ = tx.Rollback(ctx)
			_ = tx.Rollback(ctx)
		}},
		"crash": {time.Minute, func(t *testing.T, tx idemstore.Tx) {
			if err := CrashTx(tx); err != nil {
				t.Errorf("CrashTx: %v", err)
			}
		}},
		"never ended": {300 * time.Millisecond, func(t *testing.T, tx idemstore.Tx) {}},
	}
	for name, p := range paths {
		for _, claims := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, claims queued %v", name, claims), func(t *testing.T) {
				t.Parallel()
				s := turnStore(t)
				res, tx, err := s.ClaimTx(ctx, turnClaim("held", p.lease))
				if err != nil || !res.Won {
					t.Fatalf("ClaimTx = won %v, %v", res.Won, err)
				}
				passedOnce(t, s, claims, name, func() { p.end(t, tx) })
			})
		}
	}
}

// A held transaction whose lease is as short as the store allows, or a
// little longer, can fail as it begins (its context ends during BEGIN or
// the claim's check) or begin with its lease already over (the AfterFunc
// runs at once): either way the turn goes on exactly once, to the writers
// queued behind the claim, and the store serves afterwards.
func TestAttackTurnTinyLeases(t *testing.T) {
	s := turnStore(t)
	ctx := context.Background()
	for i, lease := range []time.Duration{time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond,
		time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond} {
		for j := range 5 {
			// Hold the turn, queue the claim, then two claims of keys that
			// waited after it: the held transaction's key goes first.
			give, err := s.writers.take(ctx, time.Second, nil)
			if err != nil {
				t.Fatal(err)
			}
			type out struct {
				tx  idemstore.Tx
				err error
			}
			done := make(chan out, 1)
			go func() {
				_, tx, err := s.ClaimTx(ctx, turnClaim(fmt.Sprint("tiny-", i, "-", j), lease))
				done <- out{tx, err}
			}()
			claimWaits(t, s, fmt.Sprint("tiny-", i, "-", j))
			most := queueTwo(t, s, true)
			give()
			o := <-done
			if n := most(); n != 1 {
				t.Errorf("lease %v: %d queued writers held the turn at once, want 1", lease, n)
			}
			if o.tx != nil {
				_ = o.tx.Commit(ctx, idemstore.Response{Status: 201})
			}
			turnIdle(t, s, fmt.Sprintf("lease %v (err %v)", lease, o.err))
		}
	}
	afterwards(t, s, "tiny leases")
}

// noAuthConn is a SQLite connection without an authorizer: the store
// cannot begin a handler's transaction on it (begin fails after the
// claim is won).
type noAuthConn struct{ sqliteDriverConn }

// sqliteDriverConn is a SQLite connection's methods but RegisterAuthorizer.
type sqliteDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
}

// noAuthConnector opens noAuthConns on dsn.
type noAuthConnector struct{ dsn string }

// Connect opens a SQLite connection and hides its authorizer.
func (c noAuthConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.Driver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return noAuthConn{conn.(sqliteDriverConn)}, nil
}

// Driver is the SQLite driver.
func (c noAuthConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// A claim won whose handler transaction cannot begin passes the turn once
// (the claim's, not the transaction's: there is none), releases the key,
// and leaves the turn free: over and over, with claims queued behind it.
func TestAttackTurnBeginFailurePassesTheTurnOnce(t *testing.T) {
	ctx := context.Background()
	db := sql.OpenDB(noAuthConnector{dsn: DSN(filepath.Join(t.TempDir(), "idem.db"))})
	t.Cleanup(func() { _ = db.Close() })
	s := New(db)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		give, err := s.writers.take(ctx, time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint("k", i)
		errs := make(chan error, 1)
		go func() {
			res, tx, err := s.ClaimTx(ctx, turnClaim(key, time.Minute))
			if res.Won || tx != nil {
				err = errors.Join(err, errors.New("won with no transaction"))
			}
			errs <- err
		}()
		claimWaits(t, s, key)
		most := queueTwo(t, s, true)
		give()
		if err := <-errs; err == nil {
			t.Errorf("ClaimTx on a connection without an authorizer = %v, want an error", err)
		}
		if n := most(); n != 1 {
			t.Errorf("%d queued writers held the turn at once, want 1", n)
		}
		turnIdle(t, s, "a failed begin")
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idempotency_keys WHERE key = ?`, key).Scan(&n); err != nil || n != 0 {
			t.Errorf("%d rows for the key whose transaction could not begin (%v), want it released", n, err)
		}
	}
}
