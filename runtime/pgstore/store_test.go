package pgstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/templates"
)

func claimFor(key, token string, lease time.Duration) idemstore.Claim {
	sum := sha256.Sum256([]byte(`{"amount":100}`))
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t1", Scope: "createTransfer", Key: key},
		Operation:     "createTransfer",
		Fingerprint:   sum[:],
		Token:         token,
		Lease:         lease,
		TTL:           time.Hour,
		OnLeaseExpiry: idemstore.Takeover,
	}
}

// The handler writes through a pgx.Tx it may not end itself, and which
// refuses every call once the idempotency layer has ended it.
func TestHandlerTxIsOwnedByTheStore(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	c := claimFor("k1", "tok1", time.Minute)
	res, tx, err := s.ClaimTx(ctx, c)
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v; want won", res, err)
	}
	ptx := tx.Driver().(pgx.Tx)
	if err := ptx.Commit(ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("handler's Commit = %v, want ErrTxOwned", err)
	}
	if err := ptx.Rollback(ctx); !errors.Is(err, pgstore.ErrTxOwned) {
		t.Errorf("handler's Rollback = %v, want ErrTxOwned", err)
	}
	// A nested transaction is a savepoint the handler ends itself.
	nested, err := ptx.Begin(ctx)
	if err != nil {
		t.Fatalf("nested Begin: %v", err)
	}
	if _, err := nested.Exec(ctx, "INSERT INTO effects (marker) VALUES ('undone')"); err != nil {
		t.Fatal(err)
	}
	if err := nested.Rollback(ctx); err != nil {
		t.Fatalf("nested Rollback: %v", err)
	}
	if err := writeEffect(ctx, ptx, "kept"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := ptx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Exec after Commit = %v, want pgx.ErrTxClosed", err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
		t.Errorf("second Commit succeeded")
	}
	for marker, want := range map[string]int{"kept": 1, "undone": 0} {
		if n, err := countEffects(ctx, pool, marker); err != nil || n != want {
			t.Errorf("effects %q = %d, %v; want %d", marker, n, err, want)
		}
	}
}

// A transactional handler that sits idle past its lease is ended by the
// database itself: meanwhile other claims answer "in flight" at once, then
// the key is free, and the stale Commit is fenced.
func TestTxLeaseEndsIdleHandler(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	// The lease is long enough that a loaded machine still makes the next
	// claim within it, and the sleep below waits it out from the handler's
	// last statement, after which the session sits idle.
	const lease = 2 * time.Second
	res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", lease))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v; want won", res, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := writeEffect(ctx, tx.Driver(), "stale"); err != nil {
		t.Fatal(err)
	}
	idle := time.Now()
	res, err = s.Claim(ctx, claimFor("k1", "tok2", time.Minute))
	if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
		t.Fatalf("Claim during the open tx = %+v, %v; want lost, in flight", res, err)
	}
	if d := time.Since(idle); d > 500*time.Millisecond {
		t.Errorf("Claim during the open tx took %v", d)
	}

	time.Sleep(time.Until(idle.Add(lease + time.Second)))
	res, err = s.Claim(ctx, claimFor("k1", "tok3", time.Minute))
	if err != nil || !res.Won || res.TookOver {
		t.Fatalf("Claim after the lease = %+v, %v; want a plain win (the stale claim was rolled back)", res, err)
	}
	err = tx.Commit(ctx, idemstore.Response{Status: 201})
	if !errors.Is(err, idemstore.ErrFenced) {
		t.Fatalf("stale Commit = %v, want ErrFenced", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25P03" {
		t.Errorf("stale Commit = %v, want it to carry SQLSTATE 25P03", err)
	}
	if n, err := countEffects(ctx, pool, "stale"); err != nil || n != 0 {
		t.Errorf("stale effects = %d, %v; want 0", n, err)
	}
}

// The claim refuses to run where its retry loop could not see a row
// committed meanwhile.
func TestClaimRequiresReadCommitted(t *testing.T) {
	_, pool := newStore(t)
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT * FROM idempotency_claim('t', 's', 'k', 'op', '\x01', 'tok', 1000000, 1000000, true, false)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "IK002" {
		t.Fatalf("claim under REPEATABLE READ = %v, want SQLSTATE IK002", err)
	}
}

// Migrate may run from every replica at once and again on every start; the
// down migration removes everything it made.
func TestMigrateConcurrentlyAndDown(t *testing.T) {
	schema := newSchema(t) // migrated once already
	pool := openPool(t, schema)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pgstore.Migrate(ctx, pool)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate %d: %v", i, err)
		}
	}

	// Every migration Migrate applies, undone in reverse order.
	for _, schemaOf := range []func(string) (string, string, error){templates.PhaseSchema, templates.Schema} {
		_, down, err := schemaOf("postgres")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, down); err != nil {
			t.Fatalf("down migration: %v", err)
		}
	}
	var left int
	err := pool.QueryRow(ctx, `SELECT
	    (SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname LIKE 'idempotency%')
	  + (SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace AND proname LIKE 'idempotency%')`,
		schema).Scan(&left)
	if err != nil || left != 0 {
		t.Fatalf("after down: %d objects left, %v", left, err)
	}
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
}

// The sweeper passes over an expired row that a claim holds locked instead
// of waiting for it, and deletes the others.
func TestSweepSkipsLockedRows(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		c := claimFor(k, "tok-"+k, time.Millisecond)
		c.TTL = time.Millisecond
		if res, err := s.Claim(ctx, c); err != nil || !res.Won {
			t.Fatalf("Claim %s = %+v, %v", k, res, err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(ctx) }()
	if _, err := locker.Exec(ctx, "SELECT 1 FROM idempotency_keys WHERE key = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := s.Sweep(sctx, 10)
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2 (the locked row skipped)", n, err)
	}
	_ = locker.Rollback(ctx)
	if n, err := s.Sweep(ctx, 10); err != nil || n != 1 {
		t.Fatalf("second Sweep = %d, %v; want 1", n, err)
	}
}

func TestQueryExecModeWithoutTypesIsRefused(t *testing.T) {
	for _, mode := range []string{"exec", "simple_protocol"} {
		cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?default_query_exec_mode=" + mode)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := pgstore.New(pool)
		_, err = s.Claim(context.Background(), claimFor("k", "tok", time.Minute))
		if !errors.Is(err, pgstore.ErrQueryExecMode) {
			t.Errorf("%s: Claim error %v, want ErrQueryExecMode", mode, err)
		}
		if _, _, err := s.ClaimTx(context.Background(), claimFor("k", "tok", time.Minute)); !errors.Is(err, pgstore.ErrQueryExecMode) {
			t.Errorf("%s: ClaimTx error %v, want ErrQueryExecMode", mode, err)
		}
		pool.Close()
	}
}

// An empty scope or body travels as an empty value, never as NULL, in
// the statements that end a transaction as in the claim: the completion
// finds the claim's row, and the replay has the empty body.
func TestCommitEmptyValues(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	c := claimFor("k1", "tok1", time.Minute)
	c.Scope = ""
	res, tx, err := s.ClaimTx(ctx, c)
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v; want won", res, err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte{}}); err != nil {
		t.Fatalf("Commit with an empty scope and body: %v", err)
	}
	c.Token = "tok2"
	res, err = s.Claim(ctx, c)
	if err != nil || res.Won || res.Existing.State != idemstore.StateCompleted || res.Existing.Response == nil || res.Existing.Response.Body == nil {
		t.Fatalf("replay = %+v, %v; want the completed row with an empty body", res, err)
	}
}
