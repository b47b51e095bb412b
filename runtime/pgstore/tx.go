package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ErrTxOwned is returned by Commit and Rollback of the pgx.Tx a
// transactional handler receives: the idempotency layer ends that
// transaction itself, together with the key's completion or release. A
// handler that wants its writes undone returns a response that is not
// stored (or panics); nested transactions (Begin) commit and roll back
// normally.
var ErrTxOwned = errors.New("pgstore: the idempotency layer commits or rolls back this transaction")

// ClaimTx claims c inside a new transaction, in one round trip when the
// claim is won: BEGIN, the lease-bound timeouts and the claim travel in one
// pipelined batch on a pooled connection (the first use of a connection
// also prepares the batch's statements, as pgx does for every query). A lost claim costs a second round
// trip, the ROLLBACK that returns the connection clean.
//
// The in-flight row is written inside the transaction and stays invisible to
// other sessions until Commit; the key's advisory lock, held until the
// transaction ends, makes concurrent claims answer "in flight" at once. If
// the process dies, PostgreSQL aborts the transaction: the row and the lock
// vanish and the client's next retry runs without waiting for the lease. A
// handler that hangs is ended by the database after c.Lease idle in the
// transaction (idle_in_transaction_session_timeout) or in one statement
// (statement_timeout).
func (s *Store) ClaimTx(ctx context.Context, c idem.Claim) (idem.Result, idem.Tx, error) {
	if err := checkClaim(c); err != nil {
		return idem.Result{}, nil, err
	}
	if s.unusable != nil {
		return idem.Result{}, nil, s.unusable
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return idem.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	// Batch.BeginTx puts BEGIN in the same pipeline as the claim and still
	// yields a pgx.Tx for the handler. READ COMMITTED whatever the
	// database's default: the claim needs a fresh snapshot per statement.
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	b.Queue(txTimeoutsSQL, timeoutSetting(c.Lease))
	b.Queue(claimSQL, claimArgs(c)...)
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	var res idem.Result
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			res, err = readClaim(rows, c)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.giveBack(ctx, conn)
		return idem.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	if !res.Won {
		s.giveBack(ctx, conn)
		return res, nil, nil
	}
	return res, &tx{s: s, conn: conn, h: &handlerTx{tx: br.Tx()}, keyed: true, id: c.Identity, token: c.Token}, nil
}

// Begin starts a plain READ COMMITTED transaction for a transactional
// operation that runs without a key. Its Commit commits; its Release rolls
// back.
func (s *Store) Begin(ctx context.Context) (idem.Tx, error) {
	if s.unusable != nil {
		return nil, s.unusable
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	ptx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		s.giveBack(ctx, conn)
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	return &tx{s: s, conn: conn, h: &handlerTx{tx: ptx}}, nil
}

// timeoutSetting renders a lease as a PostgreSQL timeout in whole
// milliseconds, rounded up: 0 would switch the timeout off.
func timeoutSetting(lease time.Duration) string {
	ms := (lease + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(max(ms, 1)), 10)
}

// giveBack rolls back whatever transaction conn still has open and returns
// it to the pool. The rollback runs even when ctx is already cancelled;
// should it fail, the pool closes the connection (it never pools one that
// is not idle) and PostgreSQL aborts the transaction with it.
func (s *Store) giveBack(ctx context.Context, conn *pgxpool.Conn) {
	pc := conn.Conn()
	if !pc.IsClosed() && pc.PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if _, err := pc.Exec(rctx, rollbackSQL); err != nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: rollback failed; closing the connection", slog.Any("err", err))
		}
		cancel()
	}
	conn.Release()
}

// isLeaseTimeout reports the error of a session that
// idle_in_transaction_session_timeout (SQLSTATE 25P03) ended.
func isLeaseTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P03"
}

// tx is the idem.Tx of pgstore.
type tx struct {
	s     *Store
	conn  *pgxpool.Conn // nil once the transaction has ended
	h     *handlerTx
	keyed bool
	id    idem.Identity
	token string
}

var errTxEnded = errors.New("pgstore: transaction already ended")

// Driver returns the pgx.Tx the handler writes with.
func (t *tx) Driver() any { return pgx.Tx(t.h) }

// Commit writes resp as the key's completion and commits, in one round
// trip: idempotency_complete and COMMIT are pipelined in one batch. When the
// token is no longer current the function raises, the transaction aborts,
// the COMMIT is never executed, everything is rolled back and Commit
// returns idem.ErrFenced.
func (t *tx) Commit(ctx context.Context, resp idem.Response) error {
	conn, err := t.end()
	if err != nil {
		return err
	}
	defer t.s.giveBack(ctx, conn)
	b := &pgx.Batch{}
	if t.keyed {
		args, err := completeArgs(t.id, t.token, resp)
		if err != nil {
			return err
		}
		b.Queue(completeTxSQL, args...)
	}
	b.Queue(commitSQL)
	br := conn.SendBatch(ctx, b)
	var err2 error
	if t.keyed {
		_, err2 = br.Exec()
	}
	var tag pgconn.CommandTag
	if err2 == nil {
		tag, err2 = br.Exec()
	}
	if cerr := br.Close(); err2 == nil {
		err2 = cerr
	}
	if err2 != nil {
		if isFenced(err2) {
			return idem.ErrFenced
		}
		if isLeaseTimeout(err2) {
			// The handler sat idle past its lease and PostgreSQL ended the
			// session: its writes and its claim are gone and the key may
			// already belong to a retry. That is a fenced completion.
			return fmt.Errorf("%w: the database ended the transaction when the lease ran out: %w", idem.ErrFenced, err2)
		}
		return fmt.Errorf("pgstore: commit: %w", err2)
	}
	// COMMIT of a transaction in which a statement failed (the handler
	// carried on after an error) answers ROLLBACK rather than an error.
	if tag.String() != "COMMIT" {
		return fmt.Errorf("pgstore: commit: the transaction was rolled back (%s): a statement in it failed", tag)
	}
	return nil
}

// Release rolls back the handler's writes and the claim with them.
func (t *tx) Release(ctx context.Context) error {
	conn, err := t.end()
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, rollbackSQL)
	t.s.giveBack(ctx, conn)
	if err != nil {
		return fmt.Errorf("pgstore: release: %w", err)
	}
	return nil
}

func (t *tx) end() (*pgxpool.Conn, error) {
	if t.conn == nil {
		return nil, errTxEnded
	}
	conn := t.conn
	t.conn = nil
	t.h.close()
	return conn, nil
}

// handlerTx is the pgx.Tx a transactional handler receives. It forwards to
// the transaction pgx began in the claim's batch, refuses Commit and Rollback
// (ErrTxOwned), and refuses every call once the idempotency layer has ended
// the transaction: Tx.Commit commits with a batch of its own, so pgx's
// transaction would not know it had ended, and the connection then belongs
// to the pool again. Nested transactions (Begin) are pgx's savepoints; end
// them before the handler returns.
type handlerTx struct {
	tx     pgx.Tx
	closed bool
}

var _ pgx.Tx = (*handlerTx)(nil)

func (h *handlerTx) close() { h.closed = true }

// Begin starts a nested transaction (a savepoint).
func (h *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if h.closed {
		return nil, pgx.ErrTxClosed
	}
	return h.tx.Begin(ctx)
}

// Commit returns ErrTxOwned: the idempotency layer commits.
func (h *handlerTx) Commit(context.Context) error { return ErrTxOwned }

// Rollback returns ErrTxOwned: the idempotency layer rolls back.
func (h *handlerTx) Rollback(context.Context) error { return ErrTxOwned }

// CopyFrom forwards to the transaction.
func (h *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if h.closed {
		return 0, pgx.ErrTxClosed
	}
	return h.tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch forwards to the transaction.
func (h *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if h.closed {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return h.tx.SendBatch(ctx, b)
}

// LargeObjects forwards to the transaction.
func (h *handlerTx) LargeObjects() pgx.LargeObjects { return h.tx.LargeObjects() }

// Prepare forwards to the transaction.
func (h *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if h.closed {
		return nil, pgx.ErrTxClosed
	}
	return h.tx.Prepare(ctx, name, sql)
}

// Exec forwards to the transaction.
func (h *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if h.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return h.tx.Exec(ctx, sql, args...)
}

// Query forwards to the transaction.
func (h *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if h.closed {
		return closedRows{}, pgx.ErrTxClosed
	}
	return h.tx.Query(ctx, sql, args...)
}

// QueryRow forwards to the transaction.
func (h *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if h.closed {
		return closedRows{}
	}
	return h.tx.QueryRow(ctx, sql, args...)
}

// Conn returns the underlying connection.
func (h *handlerTx) Conn() *pgx.Conn { return h.tx.Conn() }

// closedRows answers every call on an ended transaction with
// pgx.ErrTxClosed.
type closedRows struct{}

func (closedRows) Close()                                       {}
func (closedRows) Err() error                                   { return pgx.ErrTxClosed }
func (closedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (closedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (closedRows) Next() bool                                   { return false }
func (closedRows) Scan(...any) error                            { return pgx.ErrTxClosed }
func (closedRows) Values() ([]any, error)                       { return nil, pgx.ErrTxClosed }
func (closedRows) RawValues() [][]byte                          { return nil }
func (closedRows) Conn() *pgx.Conn                              { return nil }
func (closedRows) TypeMap() *pgtype.Map                         { return nil }
