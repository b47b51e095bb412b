package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// lockSlice is how long one attempt at the write lock waits before the
// claim reads the key again. Between attempts a competing claim may have
// committed the row this claim would lose to; re-reading lets it lose at
// once instead of queueing behind a transactional handler that holds the
// lock for its whole run.
const lockSlice = 50 * time.Millisecond

// errLockBusy reports that an attempt at the write lock ran out its slice.
var errLockBusy = errors.New("sqlitestore: write lock busy")

// stored is one row as the claim reads it.
type stored struct {
	operation   string
	fingerprint []byte
	state       idemstore.State
	token       sql.NullString
	leaseUntil  sql.NullInt64
	failClosed  bool
	expiresAt   int64
	status      sql.NullInt64
	headers     []byte
	body        []byte
	omitted     bool
}

// action is what a claim does about the row it read.
type action int

const (
	lose       action = iota // a live row stands; report it
	insert                   // no row, or an expired one: claim it
	takeover                 // the same request's lease ran out: take it over
	markFailed               // the same request's lease ran out: mark it indeterminate
)

// decide is the claim's rule: an absent or expired key is claimed; a live
// key of another request (fingerprint or operation) stands; the same
// request's abandoned claim is taken over when both it and the claim allow
// that, and marked indeterminate otherwise; anything else stands. row is
// nil when the key is absent.
func decide(row *stored, c idemstore.Claim, now int64) action {
	if row == nil || row.expiresAt <= now {
		return insert
	}
	if row.operation != c.Operation || !bytes.Equal(row.fingerprint, c.Fingerprint) {
		return lose
	}
	if row.state == idemstore.StateInFlight && row.leaseUntil.Valid && row.leaseUntil.Int64 <= now {
		if c.OnLeaseExpiry == idemstore.Takeover && !row.failClosed {
			return takeover
		}
		return markFailed
	}
	return lose
}

// Claim implements idemstore.Store.
//
// The claim is a read, then, only when the read says the claim may win or
// must mark the key, a read-decide-write under SQLite's write lock:
//
//   - The read runs outside any transaction. In WAL mode it never waits, even
//     while a transactional handler holds the write lock, so every claim that
//     loses (replay, in flight, mismatch, indeterminate) answers at once.
//   - The write path takes the lock with BEGIN IMMEDIATE, reads the key again
//     and decides again. SQLite has a single writer, so nothing can change
//     the row between that read and the write: the claim is atomic, never
//     "select, then insert" racing another claimant.
//
// A single INSERT ... ON CONFLICT ... RETURNING could not do it: SQLite's
// upsert cannot return the conflicting row that it did not change, which is
// what a losing claim must report, and it would take the write lock even to
// lose. The lock is taken in short slices with a re-read between them, so a
// claim that meets a competitor's freshly committed row loses at once rather
// than waiting for the lock (see lockSlice).
//
// Waiting for the lock (this process's turn, a connection, SQLite's lock)
// ends with the wait context (idemstore.WithWait) as well as with ctx: the
// claim then returns idemstore.ErrWaitEnded, having written nothing. Once
// the lock is taken, the write runs under ctx alone.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	return s.claim(ctx, c, nil)
}

// claim is Claim. When then is not nil and the claim is won, then runs
// after the claim's commit, in this process's write turn (see
// Store.writers), so that no other writer of this process takes SQLite's
// lock between the two; then must not wait for the turn itself. then is
// handed the function that passes the turn on: when then succeeds it owns
// the turn and must pass it on, once; when it fails the claim does.
func (s *Store) claim(ctx context.Context, c idemstore.Claim, then func(pass func()) error) (idemstore.Result, error) {
	if err := c.Check(); err != nil {
		return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	wctx, stop := idemstore.WaitContext(ctx)
	defer stop()
	give := time.Now().Add(s.lockWait)
	for {
		now := millis(s.now())
		row, err := readRow(ctx, s.db, c.Identity)
		if err != nil {
			return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: %w", err)
		}
		if decide(row, c, now) == lose {
			s.writers.decided(c.Identity)
			rec, err := row.record(now)
			return idemstore.Result{Existing: rec}, err
		}
		res, err := s.claimTurn(ctx, wctx, c, then)
		if !errors.Is(err, errLockBusy) {
			if !errors.Is(err, idemstore.ErrWaitEnded) {
				s.writers.decided(c.Identity)
			}
			return res, err
		}
		if time.Now().After(give) {
			return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: no write lock within %v: %w", s.lockWait, err)
		}
	}
}

// claimTurn makes one attempt at the claim's write path in this process's
// write turn, waiting under wctx for the turn, a connection and at most
// lockSlice for SQLite's lock; then, if set, runs in the same turn once the
// claim is won, and keeps the turn if it succeeds (see claim).
func (s *Store) claimTurn(ctx, wctx context.Context, c idemstore.Claim, then func(pass func()) error) (idemstore.Result, error) {
	done, err := s.admit(wctx, lockSlice, &c.Identity)
	if err != nil {
		return idemstore.Result{}, waited(wctx, err)
	}
	kept := false
	defer func() {
		if !kept {
			done()
		}
	}()
	res, err := s.claimLocked(ctx, wctx, c)
	if err == nil && res.Won && then != nil {
		err = then(done)
		kept = err == nil
	}
	return res, err
}

// waited is the error of a wait that failed: idemstore.ErrWaitEnded when
// the wait context ended it, err otherwise.
func waited(wctx context.Context, err error) error {
	if idemstore.WaitEnded(wctx) {
		return fmt.Errorf("sqlitestore: claim: %w", idemstore.ErrWaitEnded)
	}
	return err
}

// claimLocked is the claim's write path: under the write lock, read, decide
// and write. The caller holds this process's write turn; wctx bounds the
// wait for a connection and for the lock.
func (s *Store) claimLocked(ctx, wctx context.Context, c idemstore.Claim) (res idemstore.Result, err error) {
	conn, err := s.db.Conn(wctx)
	if err != nil {
		return idemstore.Result{}, waited(wctx, fmt.Errorf("sqlitestore: claim: %w", err))
	}
	defer conn.Close()
	if err := beginImmediate(wctx, conn, lockSlice); err != nil {
		return idemstore.Result{}, waited(wctx, err)
	}
	committed := false
	defer func() {
		if !committed {
			// The connection goes back to the pool: it must not stay inside
			// a transaction, whatever went wrong.
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()

	now := s.now()
	nowMs := millis(now)
	row, err := readRow(ctx, conn, c.Identity)
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	id := c.Identity
	switch decide(row, c, nowMs) {
	case insert:
		_, err = conn.ExecContext(ctx, upsertClaim,
			id.Tenant, id.Scope, id.Key, c.Operation, c.Fingerprint,
			c.Token, nowMs+durMillis(c.Lease), c.OnLeaseExpiry == idemstore.FailClosed,
			nowMs+durMillis(max(c.TTL, c.Lease)), nowMs)
		res = idemstore.Result{Won: true}
	case takeover:
		_, err = conn.ExecContext(ctx, takeOver, c.Token, nowMs+durMillis(c.Lease), id.Tenant, id.Scope, id.Key)
		res = idemstore.Result{Won: true, TookOver: true}
	case markFailed:
		_, err = conn.ExecContext(ctx, failClosed, id.Tenant, id.Scope, id.Key)
		row.state = idemstore.StateIndeterminate
		row.leaseUntil = sql.NullInt64{}
		res.Existing, err = row.record(nowMs)
	case lose:
		res.Existing, err = row.record(nowMs)
	}
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return idemstore.Result{}, fmt.Errorf("sqlitestore: claim: commit: %w", err)
	}
	committed = true
	return res, nil
}

// admit waits at most wait for this process's turn to write (see
// Store.writers), for a claim of id or, when id is nil, another write, and
// returns the function that ends it. It reports errLockBusy when the turn
// did not come.
func (s *Store) admit(ctx context.Context, wait time.Duration, id *idemstore.Identity) (func(), error) {
	return s.writers.take(ctx, wait, id)
}

// beginImmediate starts a write transaction on conn, waiting at most wait
// for the lock. It reports errLockBusy when the lock stayed taken.
func beginImmediate(ctx context.Context, conn *sql.Conn, wait time.Duration) error {
	sliceCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := conn.ExecContext(sliceCtx, "BEGIN IMMEDIATE")
	if err == nil {
		return nil
	}
	// If the statement took effect before the deadline cut it short, the
	// connection is inside a transaction; end it before the pool reuses it.
	_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
	if ctx.Err() == nil && (isBusy(err) || errors.Is(err, context.DeadlineExceeded) || sliceCtx.Err() != nil) {
		return errLockBusy
	}
	return fmt.Errorf("sqlitestore: begin: %w", err)
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// querier is what readRow needs: a *sql.DB, *sql.Conn or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readRow reads the key, or returns nil when it is absent.
func readRow(ctx context.Context, q querier, id idemstore.Identity) (*stored, error) {
	var r stored
	var state string
	err := q.QueryRowContext(ctx, selectRow, id.Tenant, id.Scope, id.Key).Scan(
		&r.operation, &r.fingerprint, &state, &r.token, &r.leaseUntil, &r.failClosed,
		&r.expiresAt, &r.status, &r.headers, &r.body, &r.omitted)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.state = idemstore.State(state)
	return &r, nil
}

// record is the row as a losing claim reports it. Scan gave the row its own
// byte slices, so the record shares nothing with the store.
func (r *stored) record(now int64) (idemstore.Record, error) {
	rec := idemstore.Record{
		State:       r.state,
		Operation:   r.operation,
		Fingerprint: r.fingerprint,
	}
	if r.state == idemstore.StateInFlight && r.leaseUntil.Valid && r.leaseUntil.Int64 > now {
		rec.LeaseRemaining = time.Duration(r.leaseUntil.Int64-now) * time.Millisecond
	}
	if r.state == idemstore.StateCompleted {
		resp := &idemstore.Response{
			Status:  int(r.status.Int64),
			Body:    r.body,
			Omitted: r.omitted,
		}
		h, err := headerwire.Decode(r.headers)
		if err != nil {
			return idemstore.Record{}, fmt.Errorf("sqlitestore: stored headers: %w", err)
		}
		resp.Header = h
		rec.Response = resp
	}
	return rec, nil
}
