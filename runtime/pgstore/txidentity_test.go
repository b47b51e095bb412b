package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// A handler that ends its transaction and is at once in a new one (COMMIT
// AND CHAIN, or COMMIT; BEGIN sent through the simple protocol) leaves a
// connection that is never idle, so the end cannot be seen by the
// connection's status; the writes before it have committed, and the
// lease's timeouts ended with it. Whatever the handler answers, a success
// that would be stored or a 503 that invites the client to send the
// request again, the client must hear 500 outcome-unknown, the handler
// must never run again for the key, and the session must not serve
// another request.
func TestHandlerThatBeginsAnotherTransactionIsSeen(t *testing.T) {
	for _, stmt := range []string{"COMMIT AND CHAIN", "COMMIT; BEGIN"} {
		for _, status := range []int{http.StatusCreated, http.StatusServiceUnavailable} {
			t.Run(fmt.Sprintf("%s, then %d", stmt, status), func(t *testing.T) {
				s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
				backends := make(chan int32, 2)
				handler := idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
					ctx := r.Context()
					key := r.Header.Get("Idempotency-Key")
					var pid int32
					if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					backends <- pid
					for _, q := range []string{"INSERT INTO effects (marker) VALUES ('" + key + "')", stmt, "INSERT INTO effects (marker) VALUES ('" + key + "-after')"} {
						via := tx
						if q == stmt {
							// As if the handler's statement escaped the
							// check before it is sent: the end still sees it.
							via = pgstore.UncheckedTx(tx)
						}
						if _, err := via.Exec(ctx, q); err != nil {
							http.Error(w, err.Error(), http.StatusInternalServerError)
							return
						}
					}
					w.WriteHeader(status)
				})
				es := enginetest.ServeEngine(t, s, handler, enginetest.EnginePolicy("createTransfer", "/transfers", time.Minute, idemstore.Takeover, true))
				a := es.MustPost(t, "/transfers", "k1", `{"amount":1}`)
				if err := enginetest.CheckProblem(a, http.StatusInternalServerError, problem.OutcomeUnknown, false); err != nil {
					t.Fatal(err)
				}
				retry := es.MustPost(t, "/transfers", "k1", `{"amount":1}`)
				if name := retry.Header.Get("Content-Type"); retry.Status < 400 || name != "application/problem+json" {
					t.Errorf("retry = %v, want a problem", retry)
				}
				if n := es.RunsOf("k1"); n != 1 {
					t.Errorf("the handler ran %d times for the key, want 1", n)
				}
				ctx := context.Background()
				if n, err := countEffects(ctx, pool, "k1"); err != nil || n != 1 {
					t.Errorf("writes before the handler's %s: %d (%v), want 1: they committed with it", stmt, n, err)
				}
				// A closed session's backend takes a moment to exit.
				pid := <-backends
				var alive int
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&alive); err != nil {
						t.Fatal(err)
					}
					if alive == 0 || time.Now().After(deadline) {
						break
					}
				}
				if alive != 0 {
					t.Errorf("the handler's session (backend %d) is still open, want it closed", pid)
				}
			})
		}
	}
}

// A statement a handler prepares by name through its pgx.Tx lasts as long
// as its transaction: the next request on the connection cannot run it,
// and may prepare one under the same name and text and run that.
func TestHandlerPreparedStatementsEndWithTheTransaction(t *testing.T) {
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			// One connection: the next request gets the one the handler used.
			s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			const name, text = "tenant_report", "SELECT 'tenant-a'::text"
			for i := range 3 {
				tx := e.begin(t, s, fmt.Sprintf("k%d", i))
				ptx := tx.Driver().(pgx.Tx)
				var got string
				if err := ptx.QueryRow(ctx, name).Scan(&got); err == nil {
					t.Errorf("request %d ran the statement an earlier request prepared: %q", i, got)
				}
				_ = tx.Rollback(ctx)
				tx = e.begin(t, s, fmt.Sprintf("k%d-prepare", i))
				ptx = tx.Driver().(pgx.Tx)
				if _, err := ptx.Prepare(ctx, name, text); err != nil {
					t.Fatalf("request %d: Prepare: %v", i, err)
				}
				if err := ptx.QueryRow(ctx, name).Scan(&got); err != nil || got != "tenant-a" {
					t.Fatalf("request %d: the statement it prepared = %q, %v", i, got, err)
				}
				if err := e.end(ctx, tx); err != nil {
					t.Fatalf("request %d: ending the transaction: %v", i, err)
				}
			}
		})
	}
}
