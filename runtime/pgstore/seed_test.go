package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// setseed seeds random() on a session; predictedRandom is the first value
// random() then returns, read on a session of its own.
const setseed = "SELECT setseed(0.25)"

func predictedRandom(t *testing.T) float64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var r float64
	if _, err := conn.Exec(ctx, setseed); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT random()").Scan(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// docs/semantics.md §7.2: the seed of random() is session state like any
// other. After tenant A's handler seeds it with setseed, tenant B's next
// random() on the connection must not be the value that seed predicts.
func TestHandlerSeedDoesNotReachThePool(t *testing.T) {
	predicted := predictedRandom(t)
	ctx := context.Background()
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			// One connection: the next request gets the one the handler used.
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			tx := e.begin(t, s, "k-a")
			if _, err := tx.Driver().(pgx.Tx).Exec(ctx, setseed); err != nil {
				t.Fatal(err)
			}
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending A's transaction: %v", err)
			}
			var got float64
			if err := pool.QueryRow(ctx, "SELECT random()").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == predicted {
				t.Fatalf("B's random() = %v, the value A's setseed(0.25) predicts", got)
			}
		})
	}
	// A keyless transaction in which a statement failed is given back
	// after an error, with the full reset and a look at what pgx prepared
	// for the handler: neither may leave a seed that the next request's
	// random() repeats.
	t.Run("keyless Commit after a failed statement", func(t *testing.T) {
		s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
		var got []float64
		for range 2 {
			tx, err := s.Begin(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			handlerExec(t, tx, setseed)
			_, _ = tx.Driver().(pgx.Tx).Exec(ctx, "SELECT 1/0")
			_ = tx.Commit(ctx, idemstore.Response{})
			var r float64
			if err := pool.QueryRow(ctx, "SELECT random()").Scan(&r); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if got[0] == predicted || got[0] == got[1] {
			t.Fatalf("B's random() after two such requests = %v, %v; setseed(0.25) predicts %v", got[0], got[1], predicted)
		}
	})
	// The full reset, which gives a connection back after an error, too.
	t.Run("full reset", func(t *testing.T) {
		pool := openPool(t, newSchema(t))
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, setseed); err != nil {
			t.Fatal(err)
		}
		if err := pgstore.Reset(ctx, conn.Conn()); err != nil {
			t.Fatal(err)
		}
		var got float64
		if err := conn.QueryRow(ctx, "SELECT random()").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == predicted {
			t.Fatalf("random() after the full reset = %v, the value setseed(0.25) predicts", got)
		}
	})
}
