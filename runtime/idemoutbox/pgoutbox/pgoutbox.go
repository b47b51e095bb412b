// Package pgoutbox is the transactional outbox (runtime/idemoutbox) on
// PostgreSQL, beside pgstore: a handler stages effects in the pgx.Tx of
// its key, and runners on any number of processes deliver them, taking
// due rows with FOR UPDATE SKIP LOCKED under a lease. Its table is a
// migration of its own (Migrate, or Schema for a migration tool), in the
// schema of pgstore's table.
package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/pgconnect"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Outbox stages effects and is the runner's and the operator's Store.
type Outbox struct {
	pool *pgxpool.Pool
	opts idemoutbox.Options
	// records are the deliveries its runners are recording.
	records idemoutbox.Records
	// table is the table named by its schema, once learnt (stageTable).
	table atomic.Pointer[pgx.Identifier]
	// learning is held by the Stage that is learning the schema, on a
	// connection opened by connect.
	learning chan struct{}
	connect  func(context.Context) (*pgx.Conn, error)
}

var _ idemoutbox.Store = (*Outbox)(nil)

// New returns the outbox in the idempotency_outbox table of pool's
// database, the one pgstore's tables are in.
func New(pool *pgxpool.Pool, opts idemoutbox.Options) *Outbox {
	return &Outbox{pool: pool, opts: opts, learning: make(chan struct{}, 1), connect: pgconnect.Like(pool.Config())}
}

// Records returns the deliveries the outbox's runners in this process
// are recording, which they pass over when they claim them
// (idemoutbox.Records).
func (o *Outbox) Records() *idemoutbox.Records { return &o.records }

// Stage writes the effect name with payload in the transaction of the
// request of ctx, a handler's context under a transactional operation on
// pgstore: it is delivered if and only if the request commits. It fails,
// staging nothing, with idemoutbox.ErrNotTransactional outside such a
// request, idemoutbox.ErrTooLarge for a payload over the limit and
// idemoutbox.ErrStagedTwice for a name the request already staged; the
// handler then answers a problem. pgstore inserts the row
// (pgstore.StageEffect), and its end of the transaction commits no other
// row of the outbox.
func (o *Outbox) Stage(ctx context.Context, name string, payload []byte) error {
	return idemoutbox.Stage(ctx, o.opts, name, payload, func(tx pgx.Tx, s idemoutbox.Staged) (bool, error) {
		table, err := o.stageTable(ctx)
		if err != nil {
			return false, err
		}
		id := idemstore.Identity{Tenant: s.Tenant, Scope: s.Scope, Key: s.Key}
		inserted, err := pgstore.StageEffect(ctx, tx, table, id, s.EffectKey, s.Name, s.Payload)
		if errors.Is(err, pgstore.ErrNoStaging) {
			err = fmt.Errorf("%w: %w", idemoutbox.ErrNotTransactional, err)
		}
		return inserted, err
	})
}

// stageTable returns the outbox's table named by its schema, as a
// session of the pool, which pgstore hands out reset, finds it. Stage runs on the handler's session, under whatever search_path or
// temporary table of the same name the handler made; named so, the effect
// is staged in the table the runners read, or the statement fails and the
// request with it, never somewhere no runner looks (docs/semantics.md
// §7.2).
//
// The schema is learnt once, on a connection opened for it as the pool
// opens its own, not on one of the pool's: transactional handlers that
// stage at once may hold every connection of the pool, each waiting in
// its first Stage for one of the others'. One Stage learns it at a time;
// the others wait for its answer.
func (o *Outbox) stageTable(ctx context.Context) (pgx.Identifier, error) {
	if t := o.table.Load(); t != nil {
		return *t, nil
	}
	select {
	case o.learning <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("pgoutbox: stage: %w", ctx.Err())
	}
	defer func() { <-o.learning }()
	if t := o.table.Load(); t != nil {
		return *t, nil
	}
	schema, err := o.tableSchema(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: stage: %w", err)
	}
	t := pgx.Identifier{schema, "idempotency_outbox"}
	o.table.Store(&t)
	return t, nil
}

// tableSchema finds the schema of the outbox's table on a connection of
// its own.
func (o *Outbox) tableSchema(ctx context.Context) (string, error) {
	conn, err := o.connect(ctx)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var schema string
	if err := conn.QueryRow(ctx, tableSchemaSQL).Scan(&schema); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: the idempotency_outbox table does not exist; apply the outbox migration (Migrate)", idemoutbox.ErrNoOutbox)
		}
		return "", err
	}
	return schema, nil
}

// Claim implements idemoutbox.Store.
func (o *Outbox) Claim(ctx context.Context, limit int, lease time.Duration, token string) ([]idemoutbox.Message, error) {
	rows, err := o.pool.Query(ctx, claimSQL, limit, lease.Microseconds(), token)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: claim: %w", err)
	}
	return collect(rows, "claim")
}

// Delivered implements idemoutbox.Store.
func (o *Outbox) Delivered(ctx context.Context, m idemoutbox.Message) (time.Duration, error) {
	var us int64
	err := o.pool.QueryRow(ctx, deliveredSQL, m.ID, m.Tenant, m.Scope, m.Key, m.EffectKey).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		err = idemoutbox.ErrGone
	}
	if err != nil {
		return 0, fmt.Errorf("pgoutbox: record delivery of %d: %w", m.ID, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Failed implements idemoutbox.Store.
func (o *Outbox) Failed(ctx context.Context, m idemoutbox.Message, token, reason string, retryIn time.Duration, dead bool) error {
	if _, err := o.pool.Exec(ctx, failedSQL, m.ID, m.Tenant, m.Scope, m.Key, m.EffectKey, reason, retryIn.Microseconds(), dead, token); err != nil {
		return fmt.Errorf("pgoutbox: record failed attempt of %d: %w", m.ID, err)
	}
	return nil
}

// Release implements idemoutbox.Store.
func (o *Outbox) Release(ctx context.Context, m idemoutbox.Message, token string) error {
	if _, err := o.pool.Exec(ctx, releaseSQL, m.ID, m.Tenant, m.Scope, m.Key, m.EffectKey, token); err != nil {
		return fmt.Errorf("pgoutbox: give back %d: %w", m.ID, err)
	}
	return nil
}

// Prune implements idemoutbox.Store.
func (o *Outbox) Prune(ctx context.Context, age time.Duration, limit int) (int, error) {
	tag, err := o.pool.Exec(ctx, pruneSQL, age.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("pgoutbox: prune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Backlog implements idemoutbox.Store.
func (o *Outbox) Backlog(ctx context.Context) (idemoutbox.Backlog, error) {
	var (
		b  idemoutbox.Backlog
		us int64
	)
	if err := o.pool.QueryRow(ctx, backlogSQL).Scan(&b.Pending, &b.Dead, &us); err != nil {
		return b, fmt.Errorf("pgoutbox: backlog: %w", noOutbox(err))
	}
	b.OldestPending = time.Duration(us) * time.Microsecond
	return b, nil
}

// List implements idemoutbox.Store.
func (o *Outbox) List(ctx context.Context, q idemoutbox.Query) ([]idemoutbox.Message, error) {
	states := make([]string, len(q.States))
	for i, s := range q.States {
		states[i] = string(s)
	}
	rows, err := o.pool.Query(ctx, listSQL, q.Tenant, q.Scope, q.Key, states, q.Limit, q.ID)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: list: %w", noOutbox(err))
	}
	ms, err := collect(rows, "list")
	return ms, noOutbox(err)
}

// Redrive implements idemoutbox.Store.
func (o *Outbox) Redrive(ctx context.Context, id int64) error {
	tag, err := o.pool.Exec(ctx, redriveSQL, id)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return fmt.Errorf("%w: effect %d", idemoutbox.ErrStagedTwice, id)
	case err != nil:
		return fmt.Errorf("pgoutbox: re-drive %d: %w", id, noOutbox(err))
	case tag.RowsAffected() == 0:
		return fmt.Errorf("%w: %d", idemoutbox.ErrNotDead, id)
	}
	return nil
}

// noOutbox is err, or idemoutbox.ErrNoOutbox beside it when it says the
// table does not exist (undefined_table).
func noOutbox(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: %w", idemoutbox.ErrNoOutbox, err)
	}
	return err
}

// collect scans rows of columns.
func collect(rows pgx.Rows, what string) ([]idemoutbox.Message, error) {
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idemoutbox.Message, error) {
		var (
			m         idemoutbox.Message
			state     string
			leased    *time.Time
			delivered *time.Time
		)
		err := r.Scan(&m.ID, &m.Tenant, &m.Scope, &m.Key, &m.EffectKey, &m.Name, &m.Payload, &state,
			&m.Attempts, &m.NextAttemptAt, &leased, &m.LastError, &m.CreatedAt, &delivered)
		m.State = idemoutbox.State(state)
		if leased != nil {
			m.LeasedUntil = *leased
		}
		if delivered != nil {
			m.DeliveredAt = *delivered
		}
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: %s: %w", what, err)
	}
	return ms, nil
}
