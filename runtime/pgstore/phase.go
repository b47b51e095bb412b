package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

var (
	_ idemstore.PhaseStore  = (*Store)(nil)
	_ idemstore.PhaseLister = (*Store)(nil)
)

// recordPhaseSQL records a phase unless a live record stands. A record
// whose ttl has run out is replaced, as an expired key is. When the
// record stands, nothing is returned and loadPhaseSQL reads it: a second
// statement, so that under READ COMMITTED it sees a record that a
// concurrent insert committed while this one waited on its key.
const recordPhaseSQL = `INSERT INTO idempotency_phases AS p
       (tenant, scope, key, name, result, expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp() OPERATOR(pg_catalog.+) ($6 OPERATOR(pg_catalog.*) interval '1 microsecond'),
        clock_timestamp())
ON CONFLICT (tenant, scope, key, name) DO UPDATE
   SET result = excluded.result, expires_at = excluded.expires_at, created_at = excluded.created_at
 WHERE p.expires_at OPERATOR(pg_catalog.<=) clock_timestamp()
RETURNING result`

// loadPhaseSQL reads a live phase record.
const loadPhaseSQL = `SELECT result FROM ONLY idempotency_phases
 WHERE tenant OPERATOR(pg_catalog.=) $1 AND scope OPERATOR(pg_catalog.=) $2 AND key OPERATOR(pg_catalog.=) $3
   AND name OPERATOR(pg_catalog.=) $4 AND expires_at OPERATOR(pg_catalog.>) clock_timestamp()`

// sweepPhasesSQL deletes a bounded batch of expired phases, skipping rows
// a record is replacing right now.
// Its functions and operators are pg_catalog's by name, as in admin.go: =
// ANY in place of IN, which finds its = by the search_path.
const sweepPhasesSQL = `DELETE FROM ONLY idempotency_phases
 WHERE ctid OPERATOR(pg_catalog.=) ANY (SELECT ctid FROM ONLY idempotency_phases
                 WHERE expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
                 ORDER BY expires_at
                 LIMIT $1::pg_catalog.int8
                   FOR UPDATE SKIP LOCKED)`

// sqlstateUndefinedTable is PostgreSQL's error for a table that does not
// exist: the phases' migration was not applied.
const sqlstateUndefinedTable = "42P01"

// phasePoolConns bounds the phase pool: a phase is two short statements,
// so a few connections serve many requests.
const phasePoolConns = 4

// phasePoolIdle is about how long an idle connection of the phase pool
// stays: the pool checks for idle connections that often.
const phasePoolIdle = 5 * time.Second

// phasePool is a small pool of the store's own for phases, made from the
// store's pool's configuration (its hooks included) on the first phase,
// that closes its connections once idle and lives as long as the process. A transactional
// request holds a connection of the store's pool for its whole handler;
// were its phase to wait for a second one, requests enough to fill that
// pool would all wait for each other until their store timeouts.
type phasePool struct {
	mu   sync.Mutex
	pool *pgxpool.Pool
}

// get returns the phase pool, made from base's configuration at first.
func (p *phasePool) get(base *pgxpool.Pool) (*pgxpool.Pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool != nil {
		return p.pool, nil
	}
	cfg := base.Config()
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = phasePoolConns, 0, 0
	cfg.MaxConnIdleTime, cfg.HealthCheckPeriod = phasePoolIdle, phasePoolIdle
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: the phases' pool: %w", err)
	}
	p.pool = pool
	return pool, nil
}

// LoadPhase implements idemstore.PhaseStore.
func (s *Store) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	pool, err := s.phases.get(s.pool)
	if err != nil {
		return nil, false, err
	}
	var result []byte
	err = pool.QueryRow(ctx, loadPhaseSQL, id.Tenant, id.Scope, id.Key, name).Scan(&result)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, phaseErr("load phase", err)
	}
	return nonNil(result), true, nil
}

// RecordPhase implements idemstore.PhaseStore. It runs on a connection
// of the phase pool, so it commits at once, beside a handler's
// transaction that holds the request's claim, and never waits for a
// connection of the store's pool that such handlers hold.
func (s *Store) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	if err := idemstore.CheckPhase(name, result, ttl); err != nil {
		return nil, err
	}
	pool, err := s.phases.get(s.pool)
	if err != nil {
		return nil, err
	}
	var stored []byte
	err = pool.QueryRow(ctx, recordPhaseSQL, id.Tenant, id.Scope, id.Key, name, nonNil(result), ttl.Microseconds()).Scan(&stored)
	if err == nil {
		return nonNil(stored), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, phaseErr("record phase", err)
	}
	stored, found, err := s.LoadPhase(ctx, id, name)
	switch {
	case err != nil:
		return nil, err
	case !found:
		// The standing record expired between the two statements.
		return nil, fmt.Errorf("pgstore: record phase %q: the standing record expired while it was read; record it again", name)
	}
	return stored, nil
}

// PhasesBesideTx implements idemstore.PhaseStore: a phase takes a
// connection of the phase pool.
func (s *Store) PhasesBesideTx() bool { return true }

// sweepPhases deletes at most limit expired phases. A database without
// the phases' table has none to delete.
func (s *Store) sweepPhases(ctx context.Context, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, sweepPhasesSQL, limit)
	if err != nil {
		if isUndefinedTable(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("pgstore: sweep phases: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// phaseErr names a missing phases table for what it is.
func phaseErr(what string, err error) error {
	if isUndefinedTable(err) {
		return fmt.Errorf("pgstore: %s: the idempotency_phases table does not exist; apply the phases migration (templates.PhaseSchema; pgstore.Migrate applies it): %w", what, err)
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateUndefinedTable
}

// nonNil returns b, or an empty slice for nil: a phase that returned
// nothing is still a recorded result, and bytea NOT NULL takes no nil.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// listPhasesSQL lists the live phases of one identity, by name.
const listPhasesSQL = `SELECT name, pg_catalog.octet_length(result), created_at, expires_at
  FROM ONLY idempotency_phases
 WHERE tenant OPERATOR(pg_catalog.=) $1 AND scope OPERATOR(pg_catalog.=) $2 AND key OPERATOR(pg_catalog.=) $3
   AND expires_at OPERATOR(pg_catalog.>) clock_timestamp()
 ORDER BY name`

// ListPhases implements idemstore.PhaseLister. A database without the
// phases' table has none.
func (s *Store) ListPhases(ctx context.Context, id idemstore.Identity) ([]idemstore.PhaseRecord, error) {
	rows, err := s.pool.Query(ctx, listPhasesSQL, id.Tenant, id.Scope, id.Key)
	if err != nil {
		if isUndefinedTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("pgstore: list phases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idemstore.PhaseRecord, error) {
		var p idemstore.PhaseRecord
		err := r.Scan(&p.Name, &p.Bytes, &p.RecordedAt, &p.ExpiresAt)
		return p, err
	})
	if err != nil {
		if isUndefinedTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("pgstore: list phases: %w", err)
	}
	return out, nil
}
