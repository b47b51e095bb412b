package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// docs/semantics.md §7.2: a statement a handler drops is not left for
// later requests to miss. Tenant A's handler deallocates the statements
// that end its transaction (DEALLOCATE ALL, or pgstore's first by the
// name it has on the session), which pgx still takes for prepared: A's
// own end may fail, but the transactions and claims that come after it
// on the one connection, keyless or keyed, must succeed.
func TestHandlerDeallocatesTheEnding(t *testing.T) {
	deallocate := map[string]func(t *testing.T, tx idemstore.Tx) string{
		"all": func(*testing.T, idemstore.Tx) string { return "DEALLOCATE ALL" },
		"the first statement": func(t *testing.T, tx idemstore.Tx) string {
			return "DEALLOCATE " + preparedName(t, tx, pgstore.SameTxSQL)
		},
	}
	for what, stmt := range deallocate {
		for _, e := range txEndings() {
			t.Run(what+", "+e.name, func(t *testing.T) {
				s, _ := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
				ctx := context.Background()
				// A first transaction prepares its ending's statements.
				if err := e.end(ctx, e.begin(t, s, "k-0")); err != nil {
					t.Fatal(err)
				}
				tx := e.begin(t, s, "k-a")
				handlerExec(t, tx, stmt(t, tx))
				_ = e.end(ctx, tx)
				for i, next := range txEndings() {
					if err := next.end(ctx, next.begin(t, s, "k-b"+next.name)); err != nil {
						t.Fatalf("%s %d after A's: %v", next.name, i, err)
					}
				}
			})
		}
	}
}
