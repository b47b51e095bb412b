package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// swapTx is the transaction under a handlerTx, which reads what it is
// given as pgx does, after swap has run: swap is a goroutine of the
// handler's that writes to the slices the handler passed to the call
// once pgstore has checked them, and before pgx reads them. It calls the
// rewriter pgx would, and a RowScanner destination, with conn, standing
// for pgx's connection.
type swapTx struct {
	pgx.Tx // unused: nil
	swap   func()
	conn   *pgx.Conn
	// copyText is the text pgx would describe the table of its last COPY
	// with.
	copyText string
}

var errSwapDone = errors.New("done")

// rewrite calls, with the connection, the last rewriter among the leading
// options of args, as pgx does.
func (t *swapTx) rewrite(ctx context.Context, sql string, args []any, option func(any) bool) {
	t.swap()
	var rw pgx.QueryRewriter
	for len(args) > 0 && option(args[0]) {
		if r, ok := args[0].(pgx.QueryRewriter); ok {
			rw = r
		}
		args = args[1:]
	}
	if rw != nil {
		_, _, _ = rw.RewriteQuery(ctx, t.conn, sql, args)
	}
}

func (t *swapTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.rewrite(ctx, sql, args, execOption)
	return pgconn.CommandTag{}, errSwapDone
}

func (t *swapTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.rewrite(ctx, sql, args, queryOption)
	return swapRows{t}, nil
}

func (t *swapTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t.rewrite(ctx, sql, args, queryOption)
	return swapRows{t}
}

func (t *swapTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		t.rewrite(ctx, q.SQL, q.Arguments, batchOption)
	}
	return pgx.FailedBatchResults(b, errSwapDone)
}

func (t *swapTx) CopyFrom(_ context.Context, table pgx.Identifier, columns []string, _ pgx.CopyFromSource) (int64, error) {
	t.swap()
	quoted := make([]string, len(columns))
	for i, c := range columns {
		quoted[i] = `"` + strings.ReplaceAll(c, `"`, `""`) + `"`
	}
	t.copyText = fmt.Sprintf("select %s from %s", strings.Join(quoted, ", "), table.Sanitize())
	return 0, errSwapDone
}

// swapRows are pgx's rows of a swapTx: Scan hands a single RowScanner
// destination these rows, which lead to the connection.
type swapRows struct{ t *swapTx }

func (r swapRows) Scan(dest ...any) error {
	r.t.swap()
	if len(dest) == 1 {
		if rs, ok := dest[0].(pgx.RowScanner); ok {
			return rs.ScanRow(r)
		}
	}
	return nil
}

func (r swapRows) Conn() *pgx.Conn                            { return r.t.conn }
func (swapRows) Close()                                       {}
func (swapRows) Err() error                                   { return nil }
func (swapRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (swapRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (swapRows) Next() bool                                   { return true }
func (swapRows) Values() ([]any, error)                       { return nil, nil }
func (swapRows) RawValues() [][]byte                          { return nil }
func (swapRows) TypeMap() *pgtype.Map                         { return nil }

// connKeeper keeps the connection pgx calls it with, as a rewriter or as
// a RowScanner.
type connKeeper struct{ kept **pgx.Conn }

func (k connKeeper) RewriteQuery(_ context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	*k.kept = conn
	return sql, args, nil
}

func (k connKeeper) ScanRow(rows pgx.Rows) error {
	*k.kept = rows.Conn()
	return nil
}

// docs/semantics.md §7.2: what pgstore checks of a handler's call is what
// pgx is given. Each call's slice (its arguments, a batch query's, Scan's
// destinations) holds a harmless value when pgstore checks it; a
// goroutine of the handler's then puts a rewriter or RowScanner there
// that keeps the connection, before pgx reads the slice. On a handlerTx
// the swap happens at that very point, every time; against PostgreSQL,
// with pgx itself and a real goroutine, TestASwappedArgumentNeverReachesTheConnection.
// A COPY's table and columns are the text pgstore records for pgx's
// description cache (cached.go): pgx must describe the one recorded.
func TestWhatPgxIsGivenIsWhatWasChecked(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(h *handlerTx, st *swapTx, keeper connKeeper){
		"Exec": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			args := []any{pgx.QueryExecModeSimpleProtocol, 1}
			st.swap = func() { args[1] = keeper }
			_, _ = h.Exec(ctx, "SELECT $1::int", args...)
		},
		"Query": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			args := []any{1}
			st.swap = func() { args[0] = keeper }
			if rows, _ := h.Query(ctx, "SELECT $1::int", args...); rows != nil {
				rows.Close()
			}
		},
		"QueryRow": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			args := []any{pgx.QueryResultFormats{}, 1}
			st.swap = func() { args[1] = keeper }
			_ = h.QueryRow(ctx, "SELECT $1::int", args...)
		},
		// The rewriter checked is wrapped; another put in its place is
		// not.
		"Exec, its rewriter replaced": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			var other *pgx.Conn
			args := []any{connKeeper{&other}, 1}
			st.swap = func() { args[0] = keeper }
			_, _ = h.Exec(ctx, "SELECT $1::int", args...)
		},
		"a batch query": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			args := []any{1}
			b := &pgx.Batch{}
			b.Queue("SELECT $1::int", args...)
			st.swap = func() { args[0] = keeper }
			_ = h.SendBatch(ctx, b).Close()
		},
		"Query's rows' Scan": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			dest := []any{new(int)}
			rows, _ := h.Query(ctx, "SELECT 1")
			defer rows.Close()
			st.swap = func() { dest[0] = keeper }
			_ = rows.Scan(dest...)
		},
		"QueryRow's Scan": func(h *handlerTx, st *swapTx, keeper connKeeper) {
			dest := []any{new(int)}
			row := h.QueryRow(ctx, "SELECT 1")
			st.swap = func() { dest[0] = keeper }
			_ = row.Scan(dest...)
		},
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			st := &swapTx{conn: new(pgx.Conn), swap: func() {}}
			var kept *pgx.Conn
			call(newHandlerTx(st, nil), st, connKeeper{&kept})
			if kept != nil {
				t.Error("pgx called a value the handler put in the slice after pgstore's check with the connection")
			}
		})
	}
}

// A COPY's table and columns give the text pgstore records for pgx's
// description cache (cached.go), written by the handler's goroutine
// after: pgx describes the text recorded.
func TestACopysSwappedColumnIsNotDescribedUnrecorded(t *testing.T) {
	swaps := map[string]func(table pgx.Identifier, columns []string){
		"a column":  func(_ pgx.Identifier, columns []string) { columns[0] = "secret" },
		"the table": func(table pgx.Identifier, _ []string) { table[0] = "pg_temp" },
	}
	for name, swap := range swaps {
		t.Run(name, func(t *testing.T) {
			table, columns := pgx.Identifier{"public", "orders"}, []string{"id", "note"}
			st := &swapTx{swap: func() { swap(table, columns) }}
			h := newHandlerTx(st, &handlerCache{describes: true})
			_, _ = h.CopyFrom(context.Background(), table, columns, pgx.CopyFromRows(nil))
			if texts, _ := h.cache.take(); !slices.Contains(texts, st.copyText) {
				t.Errorf("pgx described %q; recorded: %q", st.copyText, texts)
			}
		})
	}
}

// What the copies cost (pgx's own allocations aside, which swapTx does
// not make): an Exec, Query or QueryRow with arguments allocates their
// copy, one allocation of 16 bytes an argument, which a call whose
// options hold a rewriter made before too (it now wraps the rewriter in
// the copy); a Scan into a single destination its one-element copy;
// a call without arguments, or a Scan into several destinations, nothing.
// A batch's queries' arguments were copied already. Query's rows,
// QueryRow's row and a rewriter are wrapped: one allocation each.
func TestHandlerCallsAllocate(t *testing.T) {
	ctx := context.Background()
	h := newHandlerTx(&swapTx{conn: new(pgx.Conn), swap: func() {}}, nil)
	args := []any{1, "a", 2, "b", 3}
	var kept *pgx.Conn
	rewritten := []any{connKeeper{&kept}, 1, "a"}
	rows, _ := h.Query(ctx, "SELECT 1")
	one, two := []any{new(int)}, []any{new(int), new(int)}
	calls := []struct {
		name string
		call func()
		want float64
	}{
		{"Exec", func() { _, _ = h.Exec(ctx, "SELECT $1", args...) }, 1},
		{"Exec without arguments", func() { _, _ = h.Exec(ctx, "SELECT 1") }, 0},
		{"Exec with a rewriter", func() { _, _ = h.Exec(ctx, "SELECT $1", rewritten...) }, 2},
		{"Query", func() {
			r, _ := h.Query(ctx, "SELECT $1", args...)
			r.Close()
		}, 2},
		{"QueryRow", func() { _ = h.QueryRow(ctx, "SELECT $1", args...) }, 2},
		{"Scan into one", func() { _ = rows.Scan(one...) }, 1},
		{"Scan into two", func() { _ = rows.Scan(two...) }, 0},
	}
	for _, c := range calls {
		if n := testing.AllocsPerRun(100, c.call); n > c.want {
			t.Errorf("%s allocates %v times a call; want at most %v", c.name, n, c.want)
		}
	}
}
