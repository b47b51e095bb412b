// Package sqliteoutbox is the transactional outbox (runtime/idemoutbox)
// on SQLite, beside sqlitestore: a handler stages effects in the
// *sqlitestore.Tx of its key, and runners deliver them, claiming due rows
// under a lease in single statements that SQLite's one writer orders. Its
// table is a migration of its own (Migrate, or Schema for a migration
// tool), in the database of sqlitestore's table.
package sqliteoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Outbox stages effects and is the runner's and the operator's Store.
type Outbox struct {
	db   *sql.DB
	opts idemoutbox.Options
	now  func() time.Time
}

var _ idemoutbox.Store = (*Outbox)(nil)

// New returns the outbox in the idempotency_outbox table of db, the
// database of the service's sqlitestore (sqlitestore.Store.DB).
func New(db *sql.DB, opts idemoutbox.Options) *Outbox {
	return &Outbox{db: db, opts: opts, now: time.Now}
}

// Stage writes the effect name with payload in the transaction of the
// request of ctx, a handler's context under a transactional operation on
// sqlitestore: it is delivered if and only if the request commits. Its
// errors are pgoutbox.Outbox.Stage's.
func (o *Outbox) Stage(ctx context.Context, name string, payload []byte) error {
	return idemoutbox.Stage(ctx, o.opts, name, payload, func(tx *sqlitestore.Tx, s idemoutbox.Staged) (bool, error) {
		res, err := tx.ExecContext(ctx, stageSQL, s.Tenant, s.Scope, s.Key, s.EffectKey, s.Name, s.Payload, o.now().UnixMilli())
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n == 1, err
	})
}

// Claim implements idemoutbox.Store.
func (o *Outbox) Claim(ctx context.Context, limit int, lease time.Duration, token string) ([]idemoutbox.Message, error) {
	now := o.now()
	rows, err := o.db.QueryContext(ctx, claimSQL, now.Add(lease).UnixMilli(), token, now.UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("sqliteoutbox: claim: %w", err)
	}
	return collect(rows, "claim")
}

// Delivered implements idemoutbox.Store.
func (o *Outbox) Delivered(ctx context.Context, m idemoutbox.Message) (time.Duration, error) {
	var ms int64
	if err := o.db.QueryRowContext(ctx, deliveredSQL, m.ID, o.now().UnixMilli()).Scan(&ms); err != nil {
		return 0, fmt.Errorf("sqliteoutbox: record delivery of %d: %w", m.ID, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Failed implements idemoutbox.Store.
func (o *Outbox) Failed(ctx context.Context, m idemoutbox.Message, token, reason string, retryIn time.Duration, dead bool) error {
	if _, err := o.db.ExecContext(ctx, failedSQL, m.ID, reason, o.now().Add(retryIn).UnixMilli(), dead, token); err != nil {
		return fmt.Errorf("sqliteoutbox: record failed attempt of %d: %w", m.ID, err)
	}
	return nil
}

// Release implements idemoutbox.Store.
func (o *Outbox) Release(ctx context.Context, m idemoutbox.Message, token string) error {
	if _, err := o.db.ExecContext(ctx, releaseSQL, m.ID, token, o.now().UnixMilli()); err != nil {
		return fmt.Errorf("sqliteoutbox: give back %d: %w", m.ID, err)
	}
	return nil
}

// Prune implements idemoutbox.Store.
func (o *Outbox) Prune(ctx context.Context, age time.Duration, limit int) (int, error) {
	res, err := o.db.ExecContext(ctx, pruneSQL, o.now().Add(-age).UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqliteoutbox: prune: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// List implements idemoutbox.Store.
func (o *Outbox) List(ctx context.Context, q idemoutbox.Query) ([]idemoutbox.Message, error) {
	rows, err := o.db.QueryContext(ctx, listSQL, q.Tenant, q.Scope, q.Key, q.ID)
	if err != nil {
		return nil, fmt.Errorf("sqliteoutbox: list: %w", noOutbox(err))
	}
	ms, err := collect(rows, "list")
	if err != nil {
		return nil, err
	}
	if len(q.States) > 0 {
		ms = slices.DeleteFunc(ms, func(m idemoutbox.Message) bool { return !slices.Contains(q.States, m.State) })
	}
	if q.Limit > 0 && len(ms) > q.Limit {
		ms = ms[:q.Limit]
	}
	return ms, nil
}

// Redrive implements idemoutbox.Store.
func (o *Outbox) Redrive(ctx context.Context, id int64) error {
	res, err := o.db.ExecContext(ctx, redriveSQL, id, o.now().UnixMilli())
	var se *sqlite.Error
	switch {
	case errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return fmt.Errorf("%w: effect %d", idemoutbox.ErrStagedTwice, id)
	case err != nil:
		return fmt.Errorf("sqliteoutbox: re-drive %d: %w", id, noOutbox(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("%w: %d", idemoutbox.ErrNotDead, id)
	}
	return nil
}

// noOutbox is err, or idemoutbox.ErrNoOutbox beside it when it says the
// table does not exist. SQLite tells it only in the message.
func noOutbox(err error) error {
	if err != nil && strings.Contains(err.Error(), "no such table: idempotency_outbox") {
		return fmt.Errorf("%w: %w", idemoutbox.ErrNoOutbox, err)
	}
	return err
}

// collect scans rows of columns.
func collect(rows *sql.Rows, what string) ([]idemoutbox.Message, error) {
	defer rows.Close()
	var ms []idemoutbox.Message
	for rows.Next() {
		var (
			m                 idemoutbox.Message
			state             string
			next, created     int64
			leased, delivered sql.NullInt64
		)
		if err := rows.Scan(&m.ID, &m.Tenant, &m.Scope, &m.Key, &m.EffectKey, &m.Name, &m.Payload, &state,
			&m.Attempts, &next, &leased, &m.LastError, &created, &delivered); err != nil {
			return nil, fmt.Errorf("sqliteoutbox: %s: %w", what, err)
		}
		m.State = idemoutbox.State(state)
		m.NextAttemptAt, m.CreatedAt = time.UnixMilli(next), time.UnixMilli(created)
		if leased.Valid {
			m.LeasedUntil = time.UnixMilli(leased.Int64)
		}
		if delivered.Valid {
			m.DeliveredAt = time.UnixMilli(delivered.Int64)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqliteoutbox: %s: %w", what, err)
	}
	return ms, nil
}
