package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

var (
	_ idemstore.PhaseStore  = (*Store)(nil)
	_ idemstore.PhaseLister = (*Store)(nil)
)

// recordPhase records a phase unless a live record stands; a record whose
// ttl has run out (?7 is now) is replaced, as an expired key is. It runs
// under the write lock, and readPhase then reads what stands.
const recordPhase = `
INSERT INTO main.idempotency_phases (tenant, scope, key, name, result, expires_at, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (tenant, scope, key, name) DO UPDATE
   SET result = excluded.result, expires_at = excluded.expires_at, created_at = excluded.created_at
 WHERE idempotency_phases.expires_at <= ?7`

// readPhase reads a phase record that is live at ?5.
const readPhase = `
SELECT result FROM main.idempotency_phases
 WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND name = ?4 AND expires_at > ?5`

// sweepPhases deletes at most ?2 phases expired at ?1.
const sweepPhases = `
DELETE FROM main.idempotency_phases
 WHERE rowid IN (SELECT rowid FROM main.idempotency_phases WHERE expires_at <= ?1 LIMIT ?2)`

// queryer is the connection a write runs on, which can also read.
type queryer interface {
	execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// LoadPhase implements idemstore.PhaseStore. It reads without the write
// lock (WAL).
func (s *Store) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	return s.loadPhase(ctx, s.db, id, name)
}

func (s *Store) loadPhase(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, id idemstore.Identity, name string) ([]byte, bool, error) {
	var result []byte
	err := q.QueryRowContext(ctx, readPhase, id.Tenant, id.Scope, id.Key, name, millis(s.now())).Scan(&result)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, phaseErr("load phase", err)
	}
	if result == nil {
		result = []byte{}
	}
	return result, true, nil
}

// RecordPhase implements idemstore.PhaseStore. It takes the write turn and
// lock as a completion does, so it cannot commit while a handler's
// transaction of this database holds the lock (PhasesBesideTx).
func (s *Store) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	if err := idemstore.CheckPhase(name, result, ttl); err != nil {
		return nil, err
	}
	if result == nil {
		result = []byte{}
	}
	var stored []byte
	err := s.write(ctx, func(e execer) error {
		now := s.now()
		if _, err := e.ExecContext(ctx, recordPhase, id.Tenant, id.Scope, id.Key, name, result,
			millis(now.Add(ttl)), millis(now)); err != nil {
			return err
		}
		got, found, err := s.loadPhase(ctx, e.(queryer), id, name)
		if err == nil && !found {
			err = errors.New("the record is not there after it was written")
		}
		stored = got
		return err
	})
	if err != nil {
		return nil, phaseErr("record phase", err)
	}
	return stored, nil
}

// PhasesBesideTx implements idemstore.PhaseStore: a handler's transaction
// holds SQLite's only write lock until it ends, so no phase can commit
// beside it.
func (s *Store) PhasesBesideTx() bool { return false }

// sweepExpiredPhases deletes at most limit expired phases. A database
// without the phases' table has none to delete.
func (s *Store) sweepExpiredPhases(ctx context.Context, limit int) (int, error) {
	res, err := s.db.ExecContext(ctx, sweepPhases, millis(s.now()), limit)
	if err != nil {
		if noPhaseTable(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("sqlitestore: sweep phases: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// phaseErr names a missing phases table for what it is.
func phaseErr(what string, err error) error {
	if noPhaseTable(err) {
		return fmt.Errorf("sqlitestore: %s: the idempotency_phases table does not exist; apply the phases migration (templates.PhaseSchema; Store.Migrate applies it): %w", what, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w", what, err)
}

func noPhaseTable(err error) bool {
	return strings.Contains(err.Error(), "no such table: main.idempotency_phases")
}

// listPhases lists the phases of one identity live at ?4, by name.
const listPhases = `
SELECT name, length(result), created_at, expires_at FROM main.idempotency_phases
 WHERE tenant = ?1 AND scope = ?2 AND key = ?3 AND expires_at > ?4
 ORDER BY name`

// ListPhases implements idemstore.PhaseLister. A database without the
// phases' table has none.
func (s *Store) ListPhases(ctx context.Context, id idemstore.Identity) ([]idemstore.PhaseRecord, error) {
	rows, err := s.db.QueryContext(ctx, listPhases, id.Tenant, id.Scope, id.Key, millis(s.now()))
	if err != nil {
		if noPhaseTable(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("sqlitestore: list phases: %w", err)
	}
	defer rows.Close()
	var out []idemstore.PhaseRecord
	for rows.Next() {
		var (
			p                 idemstore.PhaseRecord
			recorded, expires int64
		)
		if err := rows.Scan(&p.Name, &p.Bytes, &recorded, &expires); err != nil {
			return nil, fmt.Errorf("sqlitestore: list phases: %w", err)
		}
		p.RecordedAt, p.ExpiresAt = time.UnixMilli(recorded), time.UnixMilli(expires)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list phases: %w", err)
	}
	return out, nil
}
