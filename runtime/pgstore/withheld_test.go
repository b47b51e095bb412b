package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// keptConn is a rewriter that keeps the connection pgx calls it with.
type keptConn struct{ conn **pgx.Conn }

func (k keptConn) RewriteQuery(_ context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	*k.conn = conn
	return sql, args, nil
}

// docs/semantics.md §7.2: the handler cannot reach past its transaction to
// the connection: nothing it is handed leads to it. pgx's rows, a batch's rows (read directly or handed to
// a query's function) and a query rewriter's call each carry the
// connection; tenant A's handler keeps it, and once A's transaction has
// ended and the connection is back in the pool, must not be able to run
// a statement on it, where another tenant's request would be.
func TestHandlerCannotKeepTheConnection(t *testing.T) {
	ways := map[string]func(t *testing.T, ptx pgx.Tx) *pgx.Conn{
		"Query's rows": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			rows, err := ptx.Query(context.Background(), "SELECT 1")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			return rows.Conn()
		},
		"a batch's rows": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			br := ptx.SendBatch(context.Background(), b)
			defer br.Close()
			rows, err := br.Query()
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			return rows.Conn()
		},
		"a batch query's function": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			var kept *pgx.Conn
			b := &pgx.Batch{}
			b.Queue("SELECT 1").Query(func(rows pgx.Rows) error {
				kept = rows.Conn()
				return nil
			})
			if err := ptx.SendBatch(context.Background(), b).Close(); err != nil {
				t.Fatal(err)
			}
			return kept
		},
		"a query rewriter": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			var kept *pgx.Conn
			if _, err := ptx.Exec(context.Background(), "SELECT $1::int", keptConn{&kept}, 1); err != nil {
				t.Fatal(err)
			}
			return kept
		},
		"a batch query's rewriter": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			var kept *pgx.Conn
			b := &pgx.Batch{}
			b.Queue("SELECT $1::int", keptConn{&kept}, 1)
			if err := ptx.SendBatch(context.Background(), b).Close(); err != nil {
				t.Fatal(err)
			}
			return kept
		},
		// pgx's Exec reads no result formats among its options: the
		// rewriter before them is the one it calls.
		"an Exec's rewriter before result formats": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			var kept, other *pgx.Conn
			_, _ = ptx.Exec(context.Background(), "SELECT 1", keptConn{&kept}, pgx.QueryResultFormats{}, keptConn{&other})
			return kept
		},
		// pgx's batch calls the last of a query's rewriters.
		"a batch query's last rewriter": func(t *testing.T, ptx pgx.Tx) *pgx.Conn {
			var kept, other *pgx.Conn
			b := &pgx.Batch{}
			b.Queue("SELECT $1::int", keptConn{&other}, keptConn{&kept}, 1)
			if err := ptx.SendBatch(context.Background(), b).Close(); err != nil {
				t.Fatal(err)
			}
			return kept
		},
	}
	for way, keep := range ways {
		t.Run(way, func(t *testing.T) {
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			a := wonTx(t, s, "k-a", "tok-a")
			kept := keep(t, a.Driver().(pgx.Tx))
			if err := a.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatal(err)
			}
			if kept == nil {
				return
			}
			t.Error("A's handler was handed the connection")
			if _, err := kept.Exec(ctx, "INSERT INTO effects (marker) VALUES ('kept')"); err == nil {
				wantEffects(t, pool, map[string]int{"kept": 0})
				t.Fatal("a statement ran on the connection A's handler kept, after A's transaction ended")
			}
		})
	}
}
