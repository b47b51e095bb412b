package pgstore

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// What the handler's pgx.Tx hands out never leads to its connection, which
// handlerTx.Conn withholds, nor to the connection's type map: pgx's rows,
// a batch's results and a query rewriter's call each carry the *pgx.Conn,
// and a handler that kept it would run statements on the connection after
// it went back to the pool, in another request's session or transaction.
// The type map (*pgtype.Map) is how pgx encodes every value it sends on
// the connection and decodes every value it reads, pgstore's own
// statements' too: a codec a handler registered there would stay on the
// pooled connection and encode the next tenant's completion (its stored
// answer, its lease and TTL) as the handler chose. So rows answer Conn
// with nil and TypeMap with a copy of the connection's map, made for
// them, in which a handler's registration changes nothing of the
// connection's; pgx's values reach a handler's code only through these
// wrappers, wherever pgx would call it with its own: a RowScanner given
// to Scan (pgx hands it the whole row, its own rows), a batch's callbacks
// (a queued query's Query, QueryRow or Exec, or its Fn), and a query
// rewriter, which is called with a nil connection (pgx's own, NamedArgs
// and StrictNamedArgs, never read it). Their fields are unexported, so
// that not even reflection reaches pgx's values behind them without
// package unsafe.

// handlerRows are the rows of a handler's query. Those of a query that
// counts as in flight until they are closed (inflight.go) carry the
// count: pgx closes rows itself when Next finds no more.
type handlerRows struct {
	rows    pgx.Rows
	calls   *handlerCalls // nil once counted out
	typeMap *pgtype.Map   // the handler's copy, made when first asked for
}

var _ pgx.Rows = (*handlerRows)(nil)

// Conn returns nil: the connection is the idempotency layer's.
func (*handlerRows) Conn() *pgx.Conn { return nil }

// TypeMap returns a copy of the connection's type map, the same one on
// every call: registering a type on it changes nothing of how the
// connection encodes or decodes, these rows' values included.
func (r *handlerRows) TypeMap() *pgtype.Map {
	if r.typeMap == nil {
		if m := r.rows.TypeMap(); m != nil {
			r.typeMap = m.Copy()
		}
	}
	return r.typeMap
}

// Next reads the next row; after the last, the rows are closed.
func (r *handlerRows) Next() bool {
	if r.rows.Next() {
		return true
	}
	r.leave()
	return false
}

// Close closes the rows.
func (r *handlerRows) Close() {
	r.rows.Close()
	r.leave()
}

// Err returns the rows' error.
func (r *handlerRows) Err() error { return r.rows.Err() }

// CommandTag returns the query's command tag.
func (r *handlerRows) CommandTag() pgconn.CommandTag { return r.rows.CommandTag() }

// FieldDescriptions describes the rows' columns.
func (r *handlerRows) FieldDescriptions() []pgconn.FieldDescription {
	return r.rows.FieldDescriptions()
}

// Scan reads the current row into dest; a RowScanner is handed these
// rows, not pgx's (withheldScan).
func (r *handlerRows) Scan(dest ...any) error { return r.rows.Scan(withheldScan(dest)...) }

// Values returns the current row's values.
func (r *handlerRows) Values() ([]any, error) { return r.rows.Values() }

// RawValues returns the current row's values as sent.
func (r *handlerRows) RawValues() [][]byte { return r.rows.RawValues() }

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
	return &handlerRows{rows: rows, calls: calls}
}

// handlerRow is the row of a handler's QueryRow.
type handlerRow struct{ row pgx.Row }

// Scan reads the row into dest; a RowScanner is handed rows that
// withhold the connection (withheldScan).
func (r handlerRow) Scan(dest ...any) error { return r.row.Scan(withheldScan(dest)...) }

// withheldScan returns what pgx's Scan is given for dest. pgx hands a
// single RowScanner destination its own rows, and with them the
// connection and its type map: such a destination is wrapped so that it
// is handed rows that withhold both. A single destination is read once,
// into a copy: a goroutine of the handler's could put a RowScanner in
// dest after the check.
func withheldScan(dest []any) []any {
	if len(dest) != 1 {
		return dest
	}
	d := dest[0]
	if rs, ok := d.(pgx.RowScanner); ok {
		d = withheldScanner{rs}
	}
	return []any{d}
}

// withheldScanner is a RowScanner of the handler's, handed the rows that
// pgx gives it wrapped.
type withheldScanner struct{ inner pgx.RowScanner }

// ScanRow scans the row through the handler's RowScanner.
func (s withheldScanner) ScanRow(rows pgx.Rows) error { return s.inner.ScanRow(withheld(rows, nil)) }

// handlerBatch is the results of a handler's batch. Those of the batch
// that counts as in flight until they are closed carry the count.
type handlerBatch struct {
	br    pgx.BatchResults
	calls *handlerCalls // nil once counted out
}

var _ pgx.BatchResults = (*handlerBatch)(nil)

// Exec reads the next query's command tag.
func (b *handlerBatch) Exec() (pgconn.CommandTag, error) { return b.br.Exec() }

// Query reads the next query's rows, which withhold their connection.
func (b *handlerBatch) Query() (pgx.Rows, error) {
	rows, err := b.br.Query()
	return withheld(rows, nil), err
}

// QueryRow reads the next query's row, which withholds its connection.
func (b *handlerBatch) QueryRow() pgx.Row { return handlerRow{b.br.QueryRow()} }

// Tx returns nil: a handler's batch begins no transaction (its BEGIN is
// refused), and pgx's would lead to the connection.
func (*handlerBatch) Tx() pgx.Tx { return nil }

// Close closes the results.
func (b *handlerBatch) Close() error {
	err := b.br.Close()
	if b.calls != nil {
		b.calls.leave()
		b.calls = nil
	}
	return err
}

// withheldBatch returns a copy of b for pgx to send, whose queued queries'
// callbacks (Fn, which pgx calls with its own results) are handed results
// that withhold the connection. pgx reads a queued query's callback from
// the batch it was given when the results come, after SendBatch has
// returned: on b, a handler could set another in the meantime.
func withheldBatch(b *pgx.Batch) *pgx.Batch {
	cp := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		c := &pgx.QueuedQuery{SQL: q.SQL, Arguments: slices.Clone(q.Arguments)}
		if fn := q.Fn; fn != nil {
			c.Fn = func(br pgx.BatchResults) error { return fn(&handlerBatch{br: br}) }
		}
		cp.QueuedQueries[i] = c
	}
	return cp
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

// withholdRewriters wraps, in args, pgstore's own, every rewriter among
// the leading options option tells in a handlerRewrite that records
// through c and refuses once calls are closed.
func withholdRewriters(args []any, option func(any) bool, c *handlerCache, calls *handlerCalls) {
	for i, a := range args {
		if !option(a) {
			break
		}
		if rw, ok := a.(pgx.QueryRewriter); ok {
			args[i] = handlerRewrite{inner: rw, c: c, calls: calls}
		}
	}
}
