// Package sqliteoutbox is the transactional outbox (runtime/idemoutbox)
// on SQLite, beside sqlitestore: a handler stages effects in the
// *sqlitestore.Tx of its key, and runners deliver them, claiming due rows
// under a lease in single statements that SQLite's one writer orders,
// each in a transaction of the store's so that it takes the process's
// write turn; the records of deliveries that wait for it together are
// written in one. Its
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
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// Outbox stages effects and is the runner's and the operator's Store.
type Outbox struct {
	store *sqlitestore.Store
	opts  idemoutbox.Options
	now   func() time.Time
	// records are the deliveries its runners are recording.
	records idemoutbox.Records
	// recorder gathers their records for the write turn.
	recorder recorder
}

var _ idemoutbox.Store = (*Outbox)(nil)

// New returns the outbox in the idempotency_outbox table of the database
// of the service's store.
func New(store *sqlitestore.Store, opts idemoutbox.Options) *Outbox {
	return &Outbox{store: store, opts: opts, now: time.Now}
}

// Records returns the deliveries the outbox's runners in this process
// are recording, which they pass over when they claim them
// (idemoutbox.Records).
func (o *Outbox) Records() *idemoutbox.Records { return &o.records }

// writeLease bounds each write transaction of a runner or an operator.
const writeLease = 30 * time.Second

// write runs f in a transaction of the store's own, in the process's
// write turn (sqlitestore's BeginTurn), waiting for the turn as long as ctx
// allows: behind the requests' transactions, completions and claims, and
// ahead of the claims once passed over for 100 ms, rather than polling
// SQLite's lock against them. A runner polling the lock lost it, over and
// over under load, to the writers the turn hands it to, and gave up after
// SQLite's busy timeout; a request meeting an outside writer on the lock
// would wait in SQLite's busy handler, for up to 100 ms a step.
func (o *Outbox) write(ctx context.Context, f func(*sqlitestore.Tx) error) error {
	return o.writeAfter(ctx, ctx, f)
}

// writeAfter is write, waiting for the turn under wait: a record written
// meanwhile by another's write stops waiting, and the write goes on
// under ctx once it has begun.
func (o *Outbox) writeAfter(wait, ctx context.Context, f func(*sqlitestore.Tx) error) error {
	t, err := o.store.BeginTurn(wait, writeLease)
	if err != nil {
		return err
	}
	tx, ok := t.Driver().(*sqlitestore.Tx)
	if !ok {
		return errors.Join(fmt.Errorf("the store's transaction is a %T", t.Driver()), t.Rollback(ctx))
	}
	if err := f(tx); err != nil {
		return errors.Join(err, t.Rollback(ctx))
	}
	return t.Commit(ctx, idemstore.Response{})
}

// exec runs one statement in write and returns the rows it changed.
func (o *Outbox) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := o.write(ctx, func(tx *sqlitestore.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// Stage writes the effect name with payload in the transaction of the
// request of ctx, a handler's context under a transactional operation on
// sqlitestore: it is delivered if and only if the request commits. Its
// errors are pgoutbox.Outbox.Stage's.
//
// The insert is sqlitestore's (StageEffect): a handler's own statements
// may not write the outbox's table, so no handler can stage an effect
// under another request's identity, nor change one staged
// (docs/semantics.md §7.2, §8.3).
func (o *Outbox) Stage(ctx context.Context, name string, payload []byte) error {
	return idemoutbox.Stage(ctx, o.opts, name, payload, func(tx *sqlitestore.Tx, s idemoutbox.Staged) (bool, error) {
		id := idemstore.Identity{Tenant: s.Tenant, Scope: s.Scope, Key: s.Key}
		inserted, err := sqlitestore.StageEffect(ctx, tx, id, s.EffectKey, s.Name, s.Payload, o.now())
		if errors.Is(err, sqlitestore.ErrNoStaging) {
			err = fmt.Errorf("%w: %w", idemoutbox.ErrNotTransactional, err)
		}
		return inserted, err
	})
}

// Claim implements idemoutbox.Store.
func (o *Outbox) Claim(ctx context.Context, limit int, lease time.Duration, token string) ([]idemoutbox.Message, error) {
	var ms []idemoutbox.Message
	err := o.write(ctx, func(tx *sqlitestore.Tx) error {
		now := o.now()
		rows, err := tx.QueryContext(ctx, claimSQL, now.Add(lease).UnixMilli(), token, now.UnixMilli(), limit)
		if err != nil {
			return err
		}
		ms, err = collect(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqliteoutbox: claim: %w", err)
	}
	return ms, nil
}

// Failed implements idemoutbox.Store.
func (o *Outbox) Failed(ctx context.Context, m idemoutbox.Message, token, reason string, retryIn time.Duration, dead bool) error {
	if _, err := o.exec(ctx, failedSQL, m.ID, m.Tenant, m.Scope, m.Key, m.EffectKey, reason, o.now().Add(retryIn).UnixMilli(), dead, token); err != nil {
		return fmt.Errorf("sqliteoutbox: record failed attempt of %d: %w", m.ID, err)
	}
	return nil
}

// recordErr is the error of m's delivery's record.
func recordErr(m idemoutbox.Message, err error) error {
	return fmt.Errorf("sqliteoutbox: record delivery of %d: %w", m.ID, err)
}

// Release implements idemoutbox.Store.
func (o *Outbox) Release(ctx context.Context, m idemoutbox.Message, token string) error {
	if _, err := o.exec(ctx, releaseSQL, m.ID, m.Tenant, m.Scope, m.Key, m.EffectKey, token, o.now().UnixMilli()); err != nil {
		return fmt.Errorf("sqliteoutbox: give back %d: %w", m.ID, err)
	}
	return nil
}

// Prune implements idemoutbox.Store.
func (o *Outbox) Prune(ctx context.Context, age time.Duration, limit int) (int, error) {
	n, err := o.exec(ctx, pruneSQL, o.now().Add(-age).UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqliteoutbox: prune: %w", err)
	}
	return int(n), nil
}

// Backlog implements idemoutbox.Store.
func (o *Outbox) Backlog(ctx context.Context) (idemoutbox.Backlog, error) {
	var (
		b      idemoutbox.Backlog
		oldest sql.NullInt64
	)
	if err := o.store.DB().QueryRowContext(ctx, backlogSQL).Scan(&b.Pending, &b.Dead, &oldest); err != nil {
		return b, fmt.Errorf("sqliteoutbox: backlog: %w", noOutbox(err))
	}
	if oldest.Valid {
		b.OldestPending = max(0, o.now().Sub(time.UnixMilli(oldest.Int64)))
	}
	return b, nil
}

// List implements idemoutbox.Store.
func (o *Outbox) List(ctx context.Context, q idemoutbox.Query) ([]idemoutbox.Message, error) {
	rows, err := o.store.DB().QueryContext(ctx, listSQL, q.Tenant, q.Scope, q.Key, q.ID)
	if err != nil {
		return nil, fmt.Errorf("sqliteoutbox: list: %w", noOutbox(err))
	}
	ms, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("sqliteoutbox: list: %w", err)
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
	n, err := o.exec(ctx, redriveSQL, id, o.now().UnixMilli())
	var se *sqlite.Error
	switch {
	case errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return fmt.Errorf("%w: effect %d", idemoutbox.ErrStagedTwice, id)
	case err != nil:
		return fmt.Errorf("sqliteoutbox: re-drive %d: %w", id, noOutbox(err))
	case n == 0:
		return fmt.Errorf("%w: %d", idemoutbox.ErrNotDead, id)
	}
	return nil
}

// noOutbox is err, or idemoutbox.ErrNoOutbox beside it when it says the
// table does not exist. SQLite tells it only in the message.
func noOutbox(err error) error {
	if err != nil && strings.Contains(err.Error(), "no such table: main.idempotency_outbox") {
		return fmt.Errorf("%w: %w", idemoutbox.ErrNoOutbox, err)
	}
	return err
}

// collect scans rows of columns.
func collect(rows *sql.Rows) ([]idemoutbox.Message, error) {
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
			return nil, err
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
		return nil, err
	}
	return ms, nil
}
