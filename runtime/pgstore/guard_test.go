package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler that ends its transaction with a raw ROLLBACK and then drops
// every advisory lock of its session (pg_advisory_unlock_all, or DISCARD
// ALL, as a library cleaning up its session might) has let go of the
// key's row and all of the key's locks on that session, and writes on in
// autocommit. The key's guard, held on a connection the handler cannot
// reach, still keeps every retry out, from this process (the same Store)
// and from another (a second Store on its own pool, as a second replica
// has), until Commit has seen what the handler did and left the key
// indeterminate. Then a retry is answered from the row, and the effect
// happened once.
func TestGuardKeepsARetryOutOfAKeyWhoseLocksTheHandlerDropped(t *testing.T) {
	drops := map[string][]string{
		"unlock all":  {"ROLLBACK", "SELECT pg_advisory_unlock_all()"},
		"discard all": {"ROLLBACK", "DISCARD ALL"},
	}
	for name, stmts := range drops {
		for _, retryFrom := range []string{"same store", "another store"} {
			t.Run(name+"/"+retryFrom, func(t *testing.T) {
				s, pool := newStore(t)
				retry := s
				if retryFrom == "another store" {
					schema := pool.Config().ConnConfig.RuntimeParams["search_path"]
					retry = pgstore.New(openPool(t, schema))
				}
				ctx := context.Background()
				tx := wonTx(t, s, "k1", "tok1")
				ptx := pgstore.Unchecked(tx)
				for _, stmt := range stmts {
					if _, err := ptx.Exec(ctx, stmt); err != nil {
						t.Fatalf("%s: %v", stmt, err)
					}
				}
				// The first handler runs on, in autocommit.
				if err := writeEffect(ctx, ptx, "k1"); err != nil {
					t.Fatal(err)
				}
				res2, tx2, err := retry.ClaimTx(ctx, claimFor("k1", "tok2", time.Minute))
				if err != nil {
					t.Fatalf("retry: %v", err)
				}
				if res2.Won {
					_ = writeEffect(ctx, tx2.Driver(), "k1")
					_ = tx2.Commit(ctx, idemstore.Response{Status: 201})
					_ = tx.Commit(ctx, idemstore.Response{Status: 201})
					t.Fatal("the retry won the key while its first handler still ran")
				}
				if res2.Existing.State != idemstore.StateInFlight {
					t.Errorf("retry met %q, want in flight", res2.Existing.State)
				}
				if err := tx.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
					t.Errorf("first Commit = %v, want outcome unknown", err)
				}
				// Settled: a retry now meets the indeterminate key, from
				// either store.
				res3, tx3, err := retry.ClaimTx(ctx, claimFor("k1", "tok3", time.Minute))
				if err != nil || res3.Won || tx3 != nil {
					t.Fatalf("retry after Commit = %+v, %v; want lost", res3, err)
				}
				if res3.Existing.State != idemstore.StateIndeterminate {
					t.Errorf("retry after Commit met %q, want indeterminate", res3.Existing.State)
				}
				wantEffects(t, pool, map[string]int{"k1": 1})
			})
		}
	}
}

// A transactional claim whose guard cannot be asked for (the guard's
// connection cannot be made) is never run unguarded: ClaimTx fails, the
// row it won is given back, and the key is free again once the guard can
// be had.
func TestGuardThatCannotConnectFailsTheClaim(t *testing.T) {
	var refuse atomic.Bool
	s, _ := newStore(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if refuse.Load() {
				return errors.New("refused by the test")
			}
			return nil
		}
	})
	ctx := context.Background()
	// The pool's one connection is made now; from here only the guard
	// connects.
	if _, err := s.Claim(ctx, claimFor("warm", "tok0", time.Minute)); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", time.Minute))
	if err == nil || res.Won || tx != nil {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		t.Fatalf("ClaimTx with no guard = %+v, %v; want an error", res, err)
	}
	refuse.Store(false)
	tx = wonTx(t, s, "k1", "tok2")
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
}

// The guard's connection ended from outside while it holds a key: the
// claim that held it still completes, and the next transactional claims
// get a new guard connection.
func TestGuardConnectionLostIsReplaced(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	// The session that holds k1's guard: the two-int advisory lock on the
	// key's hash.
	var killed int
	err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid))
		  FROM pg_locks l, idempotency_lock_id('t1', 'createTransfer', 'k1') AS id
		 WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
		   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		   AND l.classid = ((id >> 32)::int4)::oid AND l.objid = (((id << 32) >> 32)::int4)::oid`).Scan(&killed)
	if err != nil || killed != 1 {
		_ = tx.Rollback(ctx)
		t.Fatalf("terminating the guard's session: %v, %d sessions", err, killed)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit after the guard was lost: %v", err)
	}
	for i, key := range []string{"k2", "k3"} {
		res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok", time.Minute))
		if i == 0 && err != nil {
			// The first claim may be the one that finds the connection
			// gone.
			res, tx, err = s.ClaimTx(ctx, claimFor(key, "tok", time.Minute))
		}
		if err != nil || !res.Won {
			t.Fatalf("ClaimTx %s after the guard was lost = %+v, %v", key, res, err)
		}
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
}

// WithGuardConnect opens the guard's connection where the pool's would not
// do (behind a pooler in transaction mode).
func TestGuardConnectOption(t *testing.T) {
	_, pool := newStore(t)
	var calls atomic.Int32
	s := pgstore.New(pool, pgstore.WithGuardConnect(func(ctx context.Context) (*pgx.Conn, error) {
		calls.Add(1)
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	}))
	tx := wonTx(t, s, "k1", "tok1")
	if err := tx.Commit(context.Background(), idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the guard connected %d times through the option, want 1", n)
	}
}
