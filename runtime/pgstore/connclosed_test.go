package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A client that gives up while its handler waits on the database cancels
// the handler's statement, and pgx closes the connection under it. Nothing
// of the transaction can commit then: PostgreSQL rolls it back, and the
// claim's row and locks with it, once it sees the session gone. Release,
// and a Commit that could send nothing, say so with ErrConnClosed, so
// that the engine does not report a claim that stays until its lease;
// and the key is indeed free again well before the lease ends.
func TestTxWhoseConnectionClosed(t *testing.T) {
	ends := map[string]func(context.Context, idemstore.Tx) error{
		"Release": func(ctx context.Context, tx idemstore.Tx) error { return tx.Rollback(ctx) },
		"Commit": func(ctx context.Context, tx idemstore.Tx) error {
			return tx.Commit(ctx, idemstore.Response{Status: 201})
		},
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := wonTx(t, s, "k1", "tok1")
			ptx := tx.Driver().(pgx.Tx)
			if err := writeEffect(ctx, ptx, "gone"); err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := ptx.Exec(short, "SELECT pg_sleep($1::float8)", 0.5)
			cancel()
			if err == nil {
				t.Fatal("the statement outlived its context")
			}
			err = end(ctx, tx)
			if !errors.Is(err, pgstore.ErrConnClosed) {
				t.Fatalf("%s after the connection closed = %v, want ErrConnClosed", name, err)
			}
			if errors.Is(err, idemstore.ErrOutcomeUnknown) {
				t.Errorf("%s after the connection closed = %v: the outcome is known, nothing committed", name, err)
			}
			// The lease is a minute: a key that is free within seconds did
			// not stay.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				res, err := s.Claim(ctx, claimFor("k1", "tok2", time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if res.Won {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key is still held: %+v", res)
				}
			}
			wantEffects(t, pool, map[string]int{"gone": 0})
		})
	}
}
