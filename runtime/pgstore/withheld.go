package pgstore

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
)

// What the handler's pgx.Tx hands out never leads to its connection, which
// handlerTx.Conn withholds: pgx's rows, a batch's results and a query
// rewriter's call each carry the *pgx.Conn, and a handler that kept it
// would run statements on the connection after it went back to the pool,
// in another request's session or transaction. Rows answer Conn with nil,
// and a rewriter of the handler's is called with a nil connection (pgx's
// own, NamedArgs and StrictNamedArgs, never read it).

// handlerRows are the rows of a handler's query. Those of a query that
// counts as in flight until they are closed (inflight.go) carry the
// count: pgx closes rows itself when Next finds no more.
type handlerRows struct {
	pgx.Rows
	calls *handlerCalls // nil once counted out
}

// Conn returns nil: the connection is the idempotency layer's.
func (*handlerRows) Conn() *pgx.Conn { return nil }

// Next reads the next row; after the last, the rows are closed.
func (r *handlerRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.leave()
	return false
}

// Close closes the rows.
func (r *handlerRows) Close() {
	r.Rows.Close()
	r.leave()
}

func (r *handlerRows) leave() {
	if r.calls != nil {
		r.calls.leave()
		r.calls = nil
	}
}

// withheld returns rows that withhold their connection, and count their
// query out of calls when closed; calls is nil for rows that count
// nothing.
func withheld(rows pgx.Rows, calls *handlerCalls) pgx.Rows {
	if rows == nil {
		return nil
	}
	return &handlerRows{Rows: rows, calls: calls}
}

// handlerBatch is the results of a handler's batch. Those of the batch
// that counts as in flight until they are closed carry the count.
type handlerBatch struct {
	pgx.BatchResults
	calls *handlerCalls // nil once counted out
}

// Query reads the next query's rows, which withhold their connection.
func (b *handlerBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return withheld(rows, nil), err
}

// Close closes the results.
func (b *handlerBatch) Close() error {
	err := b.BatchResults.Close()
	if b.calls != nil {
		b.calls.leave()
		b.calls = nil
	}
	return err
}

// handlerRewrite is a QueryRewriter of the handler's. When c is not nil,
// the text it rewrites to is recorded among those pgx may describe
// (handlerCache.ran). A statement whose transaction ended while its
// rewriter ran is refused before pgx goes on with it, and so is one that
// it rewrote to a statement that would end the transaction
// (ErrHandlerEndsTransaction).
type handlerRewrite struct {
	inner pgx.QueryRewriter
	c     *handlerCache
	calls *handlerCalls
}

// RewriteQuery rewrites as the handler's rewriter does, with no
// connection.
func (r handlerRewrite) RewriteQuery(ctx context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	sql, args, err := r.inner.RewriteQuery(ctx, nil, sql, args)
	if err == nil && r.calls.closed.Load() {
		err = pgx.ErrTxClosed
	}
	if err == nil {
		err = r.calls.refuseEnding(sql)
	}
	if err == nil && r.c != nil {
		r.c.add(sql)
	}
	return sql, args, err
}

// pgx reads its options off the head of a call's arguments, up to the
// first that is not one, each call its own kinds (the option loops of
// pgx.Conn's Query, Exec and SendBatch); it calls the last rewriter among
// them.

// queryOption reports whether Query takes a as an option.
func queryOption(a any) bool {
	switch a.(type) {
	case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID, pgx.QueryExecMode, pgx.QueryRewriter:
		return true
	}
	return false
}

// execOption reports whether Exec takes a as an option.
func execOption(a any) bool {
	switch a.(type) {
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return true
	}
	return false
}

// batchOption reports whether a batch takes a, a queued query's
// argument, as an option.
func batchOption(a any) bool {
	_, ok := a.(pgx.QueryRewriter)
	return ok
}

// withholdRewriters returns args, whose leading options option tells,
// with every rewriter among those options wrapped in a handlerRewrite that
// records through c and refuses once calls are closed.
func withholdRewriters(args []any, option func(any) bool, c *handlerCache, calls *handlerCalls) []any {
	out := args
	for i, a := range args {
		if !option(a) {
			break
		}
		if rw, ok := a.(pgx.QueryRewriter); ok {
			if &out[0] == &args[0] {
				out = slices.Clone(args)
			}
			out[i] = handlerRewrite{inner: rw, c: c, calls: calls}
		}
	}
	return out
}
