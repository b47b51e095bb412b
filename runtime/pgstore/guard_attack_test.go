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

// These tests attack the guard of transactional claims (guard.go) from
// outside. The guard's lock space (two-int advisory locks) is shared by the
// whole database, not one schema, so every key here is random: tests of
// other schemas on the same database use the same tenants and scopes.

// guardLockWhere selects the advisory lock of key's guard in pg_locks (l).
const guardLockWhere = `l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
	   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	   AND l.classid = ((id >> 32)::int4)::oid AND l.objid = (((id << 32) >> 32)::int4)::oid`

// guardHolders counts the sessions that hold key's guard.
func guardHolders(ctx context.Context, pool *pgxpool.Pool, key string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*)
		  FROM pg_locks l, idempotency_lock_id('t1', 'createTransfer', $1) AS id
		 WHERE `+guardLockWhere, key).Scan(&n)
	return n, err
}

// killGuard terminates the session that holds key's guard and returns how
// many sessions it ended.
func killGuard(ctx context.Context, pool *pgxpool.Pool, key string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid))
		  FROM pg_locks l, idempotency_lock_id('t1', 'createTransfer', $1) AS id
		 WHERE `+guardLockWhere, key).Scan(&n)
	return n, err
}

// twoStores returns two stores on one fresh schema, each on a pool of its
// own, as two processes would have, and the first one's pool.
func twoStores(t *testing.T, tweak ...func(*pgxpool.Config)) (*pgstore.Store, *pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	schema := newSchema(t)
	p1 := openPool(t, schema, tweak...)
	p2 := openPool(t, schema, tweak...)
	return pgstore.New(p1), pgstore.New(p2), p1
}

// dropKeyLocks is what a hostile handler does: it ends its transaction
// with a raw ROLLBACK and drops every advisory lock of its session.
func dropKeyLocks(ctx context.Context, tx idemstore.Tx) error {
	ptx := pgstore.Unchecked(tx)
	for _, stmt := range []string{"ROLLBACK", "SELECT pg_advisory_unlock_all()"} {
		if _, err := ptx.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// retryMustLose claims key from s while running still holds it; a retry
// that wins runs its handler (an effect) and commits, and the test fails
// with why.
func retryMustLose(t *testing.T, s *pgstore.Store, key string, running idemstore.Tx, why string) {
	t.Helper()
	ctx := context.Background()
	res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-retry", time.Minute))
	if err != nil {
		_ = running.Rollback(ctx)
		t.Fatal(err)
	}
	if res.Won {
		_ = writeEffect(ctx, tx.Driver(), key)
		_ = tx.Commit(ctx, idemstore.Response{Status: 201})
		t.Error(why)
	}
}

// A guard ticket of a claim whose guard connection was lost must not let
// go of the guard that a later claim of the same key took on the new
// connection. Claim A holds key; its handler's session dies (its row and
// its key locks go with it) and so does the guard's connection. Claim C of
// the same Store then wins the key and its guard on a new connection. When
// A's Commit settles, its ticket finds the key held on the current
// connection and unlocks it: C runs on without a guard, and a handler of C
// that drops its own locks lets a retry of another process in.
func TestGuardAttackStaleTicketReleasesANewerGuard(t *testing.T) {
	s, other, pool := twoStores(t)
	ctx := context.Background()
	key := "stale-" + randomHex(6)
	txA := wonTx(t, s, key, "tokA")
	// A's handler takes its own session down: row and key locks vanish.
	_, _ = txA.Driver().(pgx.Tx).Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	if n, err := killGuard(ctx, pool, key); err != nil || n != 1 {
		t.Fatalf("terminating the guard's session: %d, %v", n, err)
	}
	// A claim of another key is the first to use the dead guard
	// connection, fails, and so makes the Store let go of its guards.
	if res, tx, err := s.ClaimTx(ctx, claimFor("other-"+randomHex(6), "tok", time.Minute)); err == nil {
		if tx != nil {
			_ = tx.Rollback(ctx)
		}
		t.Fatalf("a claim on the dead guard connection = %+v, want an error", res)
	}
	txC := wonTx(t, s, key, "tokC")
	if n, err := guardHolders(ctx, pool, key); err != nil || n != 1 {
		_ = txC.Rollback(ctx)
		t.Fatalf("guard holders while C runs, before A settles = %d, %v; want 1", n, err)
	}
	_ = txA.Commit(ctx, idemstore.Response{Status: 201})
	// A's Commit sends its unlock asynchronously; wait for the guard's
	// connection to be idle before looking.
	for i := 0; i < 1000 && !pgstore.GuardQuiet(s); i++ {
		time.Sleep(time.Millisecond)
	}
	n, err := guardHolders(ctx, pool, key)
	if err != nil {
		_ = txC.Rollback(ctx)
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("guard holders while C runs, after A settled = %d, want 1: A's stale ticket released C's guard", n)
	}
	// The consequence: C's handler drops its locks, and a retry of another
	// process wins the key while C still runs.
	if err := dropKeyLocks(ctx, txC); err != nil {
		t.Fatal(err)
	}
	retryMustLose(t, other, key, txC, "a retry of another process won the key while C ran: two executions")
	if err := txC.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
		t.Errorf("C's Commit = %v, want outcome unknown", err)
	}
}

// The guard's connection is made like the pool's, but a pool's PrepareConn
// hook, where docs/runtime.md asks the application to put the session
// settings it relies on (search_path among them), never runs on it: the
// guard's statement then cannot find idempotency_lock_id, and every
// transactional claim fails although plain claims work.
func TestGuardAttackSearchPathFromPrepareConn(t *testing.T) {
	schema := newSchema(t)
	pool := openPool(t, schema, func(c *pgxpool.Config) {
		delete(c.ConnConfig.RuntimeParams, "search_path")
		c.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
			_, err := conn.Exec(ctx, "SET search_path TO "+schema)
			return err == nil, err
		}
	})
	s := pgstore.New(pool)
	ctx := context.Background()
	if res, err := s.Claim(ctx, claimFor("plain-"+randomHex(6), "tok", time.Minute)); err != nil || !res.Won {
		t.Fatalf("plain Claim = %+v, %v; want won", res, err)
	}
	res, tx, err := s.ClaimTx(ctx, claimFor("tx-"+randomHex(6), "tok", time.Minute))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx with search_path set in PrepareConn = %+v, %v; want won", res, err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
}

// A hostile handler that runs as the guard's own database role can end the
// guard's session with pg_terminate_backend (docs/runtime.md says so). A
// guard connected as another role, which the application's role can
// neither signal nor is a member of, is out of its reach: the handler's
// attempt fails, and after its raw ROLLBACK and pg_advisory_unlock_all a
// retry of another process still loses while the handler writes on.
func TestGuardOfAnotherRoleIsOutOfTheHandlersReach(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	admin := openPool(t, schema)
	role := "idem_app_" + randomHex(4)
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Runs after the application's pools below have closed.
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	asApp := func(c *pgxpool.Config) { c.ConnConfig.User = role }
	guardAsAdmin := pgstore.WithGuardConnect(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, admin.Config().ConnConfig)
	})
	s := pgstore.New(openPool(t, schema, asApp), guardAsAdmin)
	other := pgstore.New(openPool(t, schema, asApp), guardAsAdmin)
	key := "kill-" + randomHex(6)
	tx := wonTx(t, s, key, "tok1")
	if err := dropKeyLocks(ctx, tx); err != nil {
		t.Fatal(err)
	}
	ptx := tx.Driver().(pgx.Tx)
	var killed int
	err := ptx.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid))
		  FROM pg_locks l, idempotency_lock_id('t1', 'createTransfer', $1) AS id
		 WHERE `+guardLockWhere, key).Scan(&killed)
	if err == nil && killed > 0 {
		_ = tx.Rollback(ctx)
		t.Fatalf("the handler ended %d guard sessions of another role", killed)
	}
	if err := writeEffect(ctx, ptx, key); err != nil {
		t.Fatal(err)
	}
	retryMustLose(t, other, key, tx, "a retry of another process won the key while its handler still ran")
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); !errors.Is(err, idemstore.ErrOutcomeUnknown) {
		t.Errorf("Commit = %v, want outcome unknown", err)
	}
	wantEffects(t, admin, map[string]int{key: 1})
}

// A transactional claim waits for its guard without heeding its context:
// while the guard's connection cannot be made (a connect that hangs, a
// server that does not answer), a claim whose context is cancelled, and a
// claim that lost its key and needs no guard at all, wait for the guard's
// own timeout (5 s) instead of returning.
func TestGuardAttackClaimTxHeedsItsContextWhileTheGuardStalls(t *testing.T) {
	schema := newSchema(t)
	pool := openPool(t, schema)
	entered := make(chan struct{}, 1)
	unblock := make(chan struct{})
	var expired atomic.Bool
	s := pgstore.New(pool, pgstore.WithGuardConnect(func(ctx context.Context) (*pgx.Conn, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-unblock:
			return pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
		case <-ctx.Done():
			expired.Store(true)
			return nil, ctx.Err()
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan bool, 1)
	go func() {
		_, tx, _ := s.ClaimTx(ctx, claimFor("stall-"+randomHex(6), "tok", time.Minute))
		if tx != nil {
			_ = tx.Rollback(context.Background())
		}
		returned <- expired.Load()
	}()
	<-entered
	cancel()
	stalled := <-returned
	close(unblock)
	if stalled {
		t.Errorf("ClaimTx returned only once the guard's connect timed out, not when its context was cancelled")
	}
}
