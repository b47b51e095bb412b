package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

var _ idemstore.PhaseStore = (*Store)(nil)

// recordPhaseSQL records a phase unless a live record stands. A record
// whose ttl has run out is replaced, as an expired key is. When the
// record stands, nothing is returned and loadPhaseSQL reads it: a second
// statement, so that under READ COMMITTED it sees a record that a
// concurrent insert committed while this one waited on its key.
const recordPhaseSQL = `INSERT INTO idempotency_phases AS p
       (tenant, scope, key, name, result, expires_at, created_at)
VALUES ($1, $2, $3, $4, $5, clock_timestamp() + $6 * interval '1 microsecond', clock_timestamp())
ON CONFLICT (tenant, scope, key, name) DO UPDATE
   SET result = excluded.result, expires_at = excluded.expires_at, created_at = excluded.created_at
 WHERE p.expires_at <= clock_timestamp()
RETURNING result`

// loadPhaseSQL reads a live phase record.
const loadPhaseSQL = `SELECT result FROM idempotency_phases
 WHERE tenant = $1 AND scope = $2 AND key = $3 AND name = $4
   AND expires_at > clock_timestamp()`

// sweepPhasesSQL deletes a bounded batch of expired phases, skipping rows
// a record is replacing right now.
const sweepPhasesSQL = `DELETE FROM idempotency_phases
 WHERE ctid IN (SELECT ctid FROM idempotency_phases
                 WHERE expires_at <= clock_timestamp()
                 ORDER BY expires_at
                 LIMIT $1
                   FOR UPDATE SKIP LOCKED)`

// sqlstateUndefinedTable is PostgreSQL's error for a table that does not
// exist: the phases' migration was not applied.
const sqlstateUndefinedTable = "42P01"

// LoadPhase implements idemstore.PhaseStore.
func (s *Store) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	var result []byte
	err := s.pool.QueryRow(ctx, loadPhaseSQL, id.Tenant, id.Scope, id.Key, name).Scan(&result)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, phaseErr("load phase", err)
	}
	return nonNil(result), true, nil
}

// RecordPhase implements idemstore.PhaseStore. It runs on a pooled
// connection of its own, so it commits at once, beside a handler's
// transaction that holds the request's claim.
func (s *Store) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	if err := idemstore.CheckPhase(name, result, ttl); err != nil {
		return nil, err
	}
	var stored []byte
	err := s.pool.QueryRow(ctx, recordPhaseSQL, id.Tenant, id.Scope, id.Key, name, nonNil(result), ttl.Microseconds()).Scan(&stored)
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

// PhasesBesideTx implements idemstore.PhaseStore: a phase takes a pooled
// connection of its own.
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
