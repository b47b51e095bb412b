package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// What the handler's pgx.Tx hands out never leads to its connection, which
// handlerTx.Conn withholds: pgx's rows, a batch's results and a query
// rewriter's call each carry the *pgx.Conn, and a handler that kept it
// would run statements on the connection after it went back to the pool,
// in another request's session or transaction. Rows answer Conn with nil,
// and a rewriter of the handler's is called with a nil connection (pgx's
// own, NamedArgs and StrictNamedArgs, never read it).

// handlerRows are the rows of a handler's query.
type handlerRows struct{ pgx.Rows }

// Conn returns nil: the connection is the idempotency layer's.
func (handlerRows) Conn() *pgx.Conn { return nil }

// withheld returns rows that withhold their connection.
func withheld(rows pgx.Rows) pgx.Rows {
	if rows == nil {
		return nil
	}
	return handlerRows{rows}
}

// handlerBatch is the results of a handler's batch.
type handlerBatch struct{ pgx.BatchResults }

// Query reads the next query's rows, which withhold their connection.
func (b handlerBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	return withheld(rows), err
}

// handlerRewrite is a QueryRewriter of the handler's. When c is not nil,
// the text it rewrites to is recorded among those pgx may describe
// (handlerCache.ran).
type handlerRewrite struct {
	inner pgx.QueryRewriter
	c     *handlerCache
}

// RewriteQuery rewrites as the handler's rewriter does, with no
// connection.
func (r handlerRewrite) RewriteQuery(ctx context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	sql, args, err := r.inner.RewriteQuery(ctx, nil, sql, args)
	if err == nil && r.c != nil {
		r.c.add(sql)
	}
	return sql, args, err
}

// withholdBatch makes the queries of a handler's batch b withhold the
// connection: a rewriter among a query's arguments, and the function a
// query's results are handed to (QueuedQuery.Query and its kin).
func withholdBatch(b *pgx.Batch, c *handlerCache) {
	for _, q := range b.QueuedQueries {
		if len(q.Arguments) > 0 {
			if rw, ok := q.Arguments[0].(pgx.QueryRewriter); ok {
				q.Arguments[0] = handlerRewrite{inner: rw, c: c}
			}
		}
		if fn := q.Fn; fn != nil {
			q.Fn = func(br pgx.BatchResults) error { return fn(handlerBatch{br}) }
		}
	}
}
