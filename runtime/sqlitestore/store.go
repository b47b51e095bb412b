package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// execer is what the token-checked writes need: a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Complete implements idemstore.Store.
func (s *Store) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	err := s.write(ctx, func(e execer) error { return s.complete(ctx, e, id, token, resp) })
	if err != nil {
		return fmt.Errorf("sqlitestore: complete: %w", err)
	}
	return nil
}

// write runs one token-checked write under the write lock, taken the way a
// claim takes it: this process's turn first, then SQLite's lock, in short
// slices until the lock wait runs out. Left to SQLite's own busy handler, a
// completion lost the lock again and again to a storm of new claims, and
// could time out after its handler had answered, leaving a finished request
// in flight.
//
// A completion waits up to the completion wait, not the claims' lock wait:
// a slow transactional handler holds SQLite's only write lock for as long
// as its lease, and a completion that gave up behind it would leave a key
// whose client already has its answer in flight, to end outcome-unknown.
func (s *Store) write(ctx context.Context, f func(e execer) error) error {
	give := time.Now().Add(s.completeWait)
	// A completion waits its whole turn: unlike a claim it has nothing to
	// re-read meanwhile, and its handler has already answered.
	done, err := s.admit(ctx, s.completeWait, nil)
	if err != nil {
		return fmt.Errorf("no write turn within %v: %w", s.completeWait, err)
	}
	defer done()
	for {
		err := s.writeLocked(ctx, f)
		if !errors.Is(err, errLockBusy) {
			return err
		}
		if time.Now().After(give) {
			return fmt.Errorf("no write lock within %v: %w", s.completeWait, err)
		}
	}
}

// writeLocked makes one attempt at SQLite's write lock and, with it, runs f
// and commits. The caller holds this process's write turn.
func (s *Store) writeLocked(ctx context.Context, f func(e execer) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := beginImmediate(ctx, conn, lockSlice); err != nil {
		return err
	}
	if err := f(conn); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// complete writes resp as the completion of the claim held with token,
// through e: the database for Store.Complete, the handler's transaction for
// Tx.Commit.
func (s *Store) complete(ctx context.Context, e execer, id idemstore.Identity, token string, resp idemstore.Response) error {
	headers := headerwire.Encode(resp.Header)
	body := resp.Body
	if resp.Omitted {
		// An omitted body is never replayed, so none is kept.
		body = nil
	}
	return fenced(e.ExecContext(ctx, complete,
		resp.Status, headers, body, resp.Omitted, millis(s.now()),
		id.Tenant, id.Scope, id.Key, token))
}

// Release implements idemstore.Store.
func (s *Store) Release(ctx context.Context, id idemstore.Identity, token string) error {
	err := s.write(ctx, func(e execer) error {
		return fenced(e.ExecContext(ctx, release, id.Tenant, id.Scope, id.Key, token))
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: release: %w", err)
	}
	return nil
}

// Abandon implements idemstore.Store.
func (s *Store) Abandon(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
	var err error
	switch mode {
	case idemstore.Takeover:
		err = s.write(ctx, func(e execer) error {
			return fenced(e.ExecContext(ctx, abandonTakeover, millis(s.now()), id.Tenant, id.Scope, id.Key, token))
		})
	case idemstore.FailClosed:
		err = s.write(ctx, func(e execer) error {
			return fenced(e.ExecContext(ctx, abandonFailClosed, id.Tenant, id.Scope, id.Key, token))
		})
	default:
		err = fmt.Errorf("unknown lease-expiry mode %q", mode)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: abandon: %w", err)
	}
	return nil
}

// Sweep implements idemstore.Sweeper. Each call is one short DELETE; run it in a
// loop until it deletes fewer than limit rows.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	res, err := s.db.ExecContext(ctx, sweep, millis(s.now()), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep: %w", err)
	}
	if int(n) >= limit {
		return int(n), nil
	}
	p, err := s.sweepExpiredPhases(ctx, limit-int(n))
	return int(n) + p, err
}

// fenced turns a token-checked write that matched no row into ErrFenced.
func fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return idemstore.ErrFenced
	}
	return nil
}
