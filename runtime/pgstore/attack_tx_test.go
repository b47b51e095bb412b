package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// These tests attack the handler's transaction from outside, as a user's
// handler would treat the pgx.Tx it is given.

// wonTx claims key with token in a transaction of s and fails the test
// unless the claim is won.
func wonTx(t *testing.T, s *pgstore.Store, key, token string) idemstore.Tx {
	t.Helper()
	return wonClaimTx(t, s, claimFor(key, token, time.Minute))
}

// wonClaimTx claims c in a transaction of s and fails the test unless the
// claim is won.
func wonClaimTx(t *testing.T, s *pgstore.Store, c idemstore.Claim) idemstore.Tx {
	t.Helper()
	res, tx, err := s.ClaimTx(context.Background(), c)
	if err != nil || !res.Won {
		t.Fatalf("%s's ClaimTx = %+v, %v; want won", c.Tenant, res, err)
	}
	return tx
}

// tenantClaim is claimFor's claim of key, with a lease of a minute, for
// tenant.
func tenantClaim(tenant, key, token string) idemstore.Claim {
	c := claimFor(key, token, time.Minute)
	c.Tenant = tenant
	return c
}

// wantEffects fails the test unless each marker has the number of effects
// given.
func wantEffects(t *testing.T, pool *pgxpool.Pool, want map[string]int) {
	t.Helper()
	for marker, n := range want {
		if got, err := countEffects(context.Background(), pool, marker); err != nil || got != n {
			t.Errorf("effects %q = %d, %v; want %d", marker, got, err, n)
		}
	}
}

// A nested transaction (a savepoint) came straight from pgx: its Conn()
// handed the handler the raw connection that the handler's own Conn()
// withholds, and it did not know when the idempotency layer had ended the
// outer transaction. A handler (or a goroutine it left behind) that kept
// one wrote after the commit, in autocommit, on a connection that was back
// in the pool: an effect outside any key.
func TestAttackNestedTxCannotEscape(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	ptx := tx.Driver().(pgx.Tx)
	ended, err := ptx.Begin(ctx)
	if err != nil {
		t.Fatalf("nested Begin: %v", err)
	}
	if c := ended.Conn(); c != nil {
		t.Errorf("a nested transaction's Conn() is the raw connection")
	}
	if _, err := ended.Exec(ctx, "INSERT INTO effects (marker) VALUES ('inside')"); err != nil {
		t.Fatal(err)
	}
	if err := ended.Commit(ctx); err != nil {
		t.Fatalf("nested Commit (RELEASE SAVEPOINT): %v", err)
	}
	open, err := ptx.Begin(ctx)
	if err != nil {
		t.Fatalf("second nested Begin: %v", err)
	}
	deeper, err := open.Begin(ctx)
	if err != nil {
		t.Fatalf("nested nested Begin: %v", err)
	}
	if c := deeper.Conn(); c != nil {
		t.Errorf("a nested nested transaction's Conn() is the raw connection")
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for name, n := range map[string]pgx.Tx{"ended": ended, "left open": open, "deeper": deeper} {
		if _, err := n.Exec(ctx, "INSERT INTO effects (marker) VALUES ('escaped')"); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("Exec on the %s nested transaction after the commit = %v, want pgx.ErrTxClosed", name, err)
		}
		if err := n.Commit(ctx); err == nil {
			t.Errorf("Commit of the %s nested transaction after the commit succeeded", name)
		}
	}
	wantEffects(t, pool, map[string]int{"inside": 1, "escaped": 0})
}

// A nested transaction's Commit and Rollback end its savepoint only; they
// never end the transaction the key commits with.
func TestAttackNestedRollbackKeepsTheOuterTransaction(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	ptx := tx.Driver().(pgx.Tx)
	if err := writeEffect(ctx, ptx, "outer"); err != nil {
		t.Fatal(err)
	}
	sp, err := ptx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, "INSERT INTO effects (marker) VALUES ('undone')"); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); err != nil {
		t.Fatalf("nested Rollback: %v", err)
	}
	if err := sp.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("second nested Rollback = %v, want pgx.ErrTxClosed", err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	wantEffects(t, pool, map[string]int{"outer": 1, "undone": 0})
}

// A handler that kills its own backend through the transaction takes its
// writes and its claim down with it: the commit fails, nothing it wrote
// stays, and the key is free for a retry that then runs once.
func TestAttackHandlerTerminatesItsOwnBackend(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	ptx := tx.Driver().(pgx.Tx)
	if err := writeEffect(ctx, ptx, "doomed"); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := ptx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	_, _ = ptx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
		t.Fatalf("Commit after the backend died succeeded")
	}
	if n, err := countEffects(ctx, pool, "doomed"); err != nil || n != 0 {
		t.Fatalf("effects = %d, %v; want 0", n, err)
	}
	// The backend says goodbye before it has let go of its locks: the
	// retry comes once it has.
	waitLocksFreed(t, pool, pid)
	res, err := s.Claim(ctx, claimFor("k1", "tok2", time.Minute))
	if err != nil || !res.Won {
		t.Fatalf("retry = %+v, %v; want a win", res, err)
	}
}

// A handler commits its transaction itself (a raw COMMIT, claim row and
// write together) and then kills its own backend, so Commit cannot mark
// the key indeterminate. The claim row it committed stands in flight;
// after its lease, the retry must meet it indeterminate rather than take
// it over, or the committed write happens twice.
func TestAttackHandlerCommitsThenTerminatesItsBackend(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", lease))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v; want won", res, err)
	}
	ptx := pgstore.Unchecked(tx)
	if err := writeEffect(ctx, ptx, "committed"); err != nil {
		t.Fatal(err)
	}
	if _, err := ptx.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	_, _ = ptx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
		t.Fatalf("Commit after the handler committed and its backend died succeeded")
	}
	time.Sleep(lease + 100*time.Millisecond)

	res, tx, err = s.ClaimTx(ctx, claimFor("k1", "tok2", lease))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if res.Won {
		if err := writeEffect(ctx, tx.Driver(), "committed"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatalf("retry's Commit: %v", err)
		}
		t.Errorf("the retry took the key over (TookOver %v) from a handler that had committed on its own", res.TookOver)
	} else if res.Existing.State != idemstore.StateIndeterminate {
		t.Errorf("the retry lost to a %q record, want indeterminate", res.Existing.State)
	}
	wantEffects(t, pool, map[string]int{"committed": 1})
}

// waitLocksFreed waits until the backend pid holds no lock.
func waitLocksFreed(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_locks WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still holds %d locks", pid, n)
		}
	}
}
