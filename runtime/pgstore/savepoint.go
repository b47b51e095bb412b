package pgstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// A handler's nested transactions (the Begin of the pgx.Tx it receives)
// are savepoints that pgstore sends itself, under names of its own, and
// keeps count of: the handler's own SAVEPOINT, RELEASE and ROLLBACK TO
// are refused (endsTx), so the savepoints counted here are all the
// transaction has. One the handler left open at the end of a committing
// transaction is released first of all (releaseOuterSQL): the statements
// that end the transaction must run at its top level, since COMMIT
// commits an open savepoint before anything else, and that gives the
// transaction back the read-write state SET TRANSACTION READ ONLY took
// from it inside the savepoint (readOnlySQL).

// outerSavepoint names the outermost of a transaction's open savepoints,
// so that the statement that releases it (releaseOuterSQL) is always the
// same; the savepoints opened inside it are numbered.
const outerSavepoint = "pgstore_sp"

// releaseOuterSQL releases the outermost open savepoint, and with it every
// savepoint opened inside it.
const releaseOuterSQL = `RELEASE SAVEPOINT ` + outerSavepoint

// savepoints are the savepoints open in a handler's transaction, shared by
// the transaction and all its nested ones. A savepoint is counted open
// once its SAVEPOINT succeeded and until its RELEASE, or its ROLLBACK TO
// and RELEASE, succeeded: a statement that failed left the savepoints as
// they were, so the count never misses one that is open.
type savepoints struct {
	mu   sync.Mutex
	next int
	open []string // outermost first
}

// savepoint is one nested transaction's savepoint.
type savepoint struct {
	name   string
	closed atomic.Bool
}

// begin opens a savepoint on tx.
func (s *savepoints) begin(ctx context.Context, tx pgx.Tx) (*savepoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := outerSavepoint
	if len(s.open) > 0 {
		s.next++
		name = "sp_" + strconv.Itoa(s.next)
	}
	if err := execSavepoint(ctx, tx, "SAVEPOINT "+name); err != nil {
		return nil, err
	}
	s.open = append(s.open, name)
	return &savepoint{name: name}, nil
}

// end releases sp on tx, having rolled back to it first when rollback is
// set, and closes it (even if that failed, as pgx closes its nested
// transactions). Ending a savepoint ends every one opened inside it; a
// nested transaction whose savepoint went so fails to end it, as
// PostgreSQL fails a name it no longer knows.
func (s *savepoints) end(ctx context.Context, tx pgx.Tx, sp *savepoint, rollback bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sp.closed.Swap(true) {
		return pgx.ErrTxClosed
	}
	sql := "RELEASE SAVEPOINT " + sp.name
	if rollback {
		sql = "ROLLBACK TO SAVEPOINT " + sp.name + "; " + sql
	}
	if err := execSavepoint(ctx, tx, sql); err != nil {
		return err
	}
	for i := len(s.open) - 1; i >= 0; i-- {
		if s.open[i] == sp.name {
			s.open = s.open[:i]
			break
		}
	}
	return nil
}

// execSavepoint sends sql, statements of a savepoint's, on tx's
// connection as they are: not through pgx's Exec, which would run instead
// a statement the handler prepared under sql as its name.
func execSavepoint(ctx context.Context, tx pgx.Tx, sql string) error {
	_, err := tx.Conn().PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// anyOpen reports whether a savepoint is still open.
func (s *savepoints) anyOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open) > 0
}
