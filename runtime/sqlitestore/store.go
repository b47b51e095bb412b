package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// execer is what the token-checked writes need: a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, id idem.Identity, token string, resp idem.Response) error {
	if err := s.complete(ctx, s.db, id, token, resp); err != nil {
		return fmt.Errorf("sqlitestore: complete: %w", err)
	}
	return nil
}

// complete writes resp as the completion of the claim held with token,
// through e: the database for Store.Complete, the handler's transaction for
// Tx.Commit.
func (s *Store) complete(ctx context.Context, e execer, id idem.Identity, token string, resp idem.Response) error {
	var headers sql.NullString
	if resp.Header != nil {
		b, err := json.Marshal(resp.Header)
		if err != nil {
			return fmt.Errorf("encode headers: %w", err)
		}
		headers = sql.NullString{String: string(b), Valid: true}
	}
	body := resp.Body
	if resp.Omitted {
		// An omitted body is never replayed, so none is kept.
		body = nil
	}
	return fenced(e.ExecContext(ctx, complete,
		resp.Status, headers, body, resp.Omitted, millis(s.now()),
		id.Tenant, id.Scope, id.Key, token))
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, id idem.Identity, token string) error {
	if err := fenced(s.db.ExecContext(ctx, release, id.Tenant, id.Scope, id.Key, token)); err != nil {
		return fmt.Errorf("sqlitestore: release: %w", err)
	}
	return nil
}

// Abandon implements idem.Store.
func (s *Store) Abandon(ctx context.Context, id idem.Identity, token string, mode idem.LeaseExpiry) error {
	var err error
	switch mode {
	case idem.Takeover:
		err = fenced(s.db.ExecContext(ctx, abandonTakeover, millis(s.now()), id.Tenant, id.Scope, id.Key, token))
	case idem.FailClosed:
		err = fenced(s.db.ExecContext(ctx, abandonFailClosed, id.Tenant, id.Scope, id.Key, token))
	default:
		err = fmt.Errorf("unknown lease-expiry mode %q", mode)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: abandon: %w", err)
	}
	return nil
}

// Sweep implements idem.Sweeper. Each call is one short DELETE; run it in a
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
	return int(n), nil
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
		return idem.ErrFenced
	}
	return nil
}
