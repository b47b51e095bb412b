//go:build !race

// The handler's goroutine here writes to a slice the handler passed to a
// call while the call reads it: that is the attack, and the race detector
// would report it as the test's own race.

package pgstore_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// connBox is a value pgx calls nothing of the connection's with: as an
// argument its value fails (no statement is sent), as a destination it
// takes any value. Its one field is where a keptConn or keptRowsConn
// built from a torn read of the slot (the type of one, the pointer of the
// other) keeps the connection.
type connBox struct{ conn *pgx.Conn }

func (*connBox) Value() (driver.Value, error) { return nil, errors.New("no value") }

func (*connBox) Scan(any) error { return nil }

// keptRowsConn is a RowScanner that keeps the connection of the rows pgx
// hands it.
type keptRowsConn struct{ conn **pgx.Conn }

func (k keptRowsConn) ScanRow(rows pgx.Rows) error {
	*k.conn = rows.Conn()
	return nil
}

// swapping has a goroutine of the handler's write a and b in turn to
// *slot until stopped; stop leaves a there.
func swapping(slot *any, a, b any) (stop func()) {
	var done atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			*slot = a
			if done.Load() {
				return
			}
			*slot = b
		}
	}()
	return func() {
		done.Store(true)
		<-finished
	}
}

// docs/semantics.md §7.2: what pgstore checks of a call's arguments (a
// rewriter among pgx's options is called without the connection) and of
// Scan's destinations (a RowScanner is handed rows that withhold it) is
// what pgx is given. The handler passes a slice whose element a goroutine
// of its own keeps swapping between a value pgx calls nothing of the
// connection's with and a rewriter or RowScanner that keeps the
// connection: had pgx read the handler's slice after pgstore checked it,
// one of the calls would see the harmless value at the check and pgx the
// keeper, which pgx would call with its *pgx.Conn, the pool's connection,
// which outlives the request. The calls whose argument is the harmless
// value fail before anything is sent, so each try costs no round trip.
func TestASwappedArgumentNeverReachesTheConnection(t *testing.T) {
	const budget = 3 * time.Second
	ctx := context.Background()
	type attack struct {
		slot []any // the handler's slice
		at   int   // the element its goroutine swaps
		call func() error
		done func() // nil for none
	}
	cases := map[string]func(ptx pgx.Tx) attack{
		"Exec's rewriter": func(ptx pgx.Tx) attack {
			slot := []any{pgx.QueryExecModeSimpleProtocol, nil}
			return attack{slot, 1, func() error {
				_, err := ptx.Exec(ctx, "SELECT 1", slot...)
				return err
			}, nil}
		},
		"Query's rewriter": func(ptx pgx.Tx) attack {
			slot := []any{pgx.QueryExecModeSimpleProtocol, nil}
			return attack{slot, 1, func() error {
				rows, err := ptx.Query(ctx, "SELECT 1", slot...)
				if rows != nil {
					rows.Close()
				}
				return err
			}, nil}
		},
		"QueryRow's rewriter": func(ptx pgx.Tx) attack {
			slot := []any{pgx.QueryExecModeSimpleProtocol, nil}
			return attack{slot, 1, func() error {
				var n int32
				return ptx.QueryRow(ctx, "SELECT 1", slot...).Scan(&n)
			}, nil}
		},
		"a batch query's rewriter": func(ptx pgx.Tx) attack {
			slot := []any{nil}
			return attack{slot, 0, func() error {
				b := &pgx.Batch{}
				b.Queue("SELECT 1", slot...)
				return ptx.SendBatch(ctx, b).Close()
			}, nil}
		},
		"Scan's RowScanner": func(ptx pgx.Tx) attack {
			slot := []any{nil}
			var rows pgx.Rows
			return attack{slot, 0, func() error {
				if rows == nil || !rows.Next() {
					var err error
					if rows, err = ptx.Query(ctx, "SELECT g FROM generate_series(1, 100000) g"); err != nil {
						return err
					}
					rows.Next()
				}
				return rows.Scan(slot...)
			}, func() {
				if rows != nil {
					rows.Close()
				}
			}}
		},
	}
	for name, attackOn := range cases {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			a := wonTx(t, s, "k-a", "tok-a")
			var kept *pgx.Conn
			box := new(connBox)
			att := attackOn(a.Driver().(pgx.Tx))
			var keeper any = keptConn{&kept}
			if name == "Scan's RowScanner" {
				keeper = keptRowsConn{&kept}
			}
			att.slot[att.at] = box
			stop := swapping(&att.slot[att.at], box, keeper)
			tries := 0
			for end := time.Now().Add(budget); kept == nil && box.conn == nil && time.Now().Before(end); tries++ {
				_ = att.call()
			}
			stop()
			if att.done != nil {
				att.done()
			}
			if kept != nil || box.conn != nil {
				t.Errorf("after %d calls, pgx called a %T the handler swapped in after pgstore's check with the connection", tries, keeper)
			}
			_ = a.Commit(context.Background(), idemstore.Response{Status: 201})
		})
	}
}
