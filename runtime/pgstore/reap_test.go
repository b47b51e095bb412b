package pgstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// syncBuffer is a bytes.Buffer a logger may write from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// The lease bounds a transactional claim's transaction through timeouts
// the transaction sets as it begins, which a handler may switch off from
// its transaction. When its host then dies without closing its sockets,
// the server keeps the idle transaction, and the key's locks, until TCP
// keepalive notices, hours later. A claim that meets the key held ends
// the holder's session once it has sat idle past its lease and 5 s
// (docs/semantics.md §5.1), whatever the lease of the claim that meets
// it: the key is free again, and the end is logged.
func TestADeadHostsKeyIsFreeOnceItsLeaseAndGraceHaveRunOut(t *testing.T) {
	for _, tx := range []bool{true, false} {
		name := "plain retry"
		if tx {
			name = "transactional retry"
		}
		t.Run(name, func(t *testing.T) { deadHostsRetry(t, tx) })
	}
}

func deadHostsRetry(t *testing.T, inTx bool) {
	schema := newSchema(t)
	ctx := context.Background()
	f := newFreezer()
	dead := pgstore.New(openPool(t, schema, func(cfg *pgxpool.Config) { cfg.ConnConfig.DialFunc = f.dial }))
	t.Cleanup(f.thaw)
	var logged syncBuffer
	live := pgstore.New(openPool(t, schema), pgstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))

	const lease = 2 * time.Second
	claimed := time.Now()
	res, tx, err := dead.ClaimTx(ctx, claimFor("k1", "tok-dead", lease))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v", res, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	h := tx.Driver().(pgx.Tx)
	for _, q := range []string{
		`SET idle_in_transaction_session_timeout = 0`,
		`SET statement_timeout = 0`,
	} {
		if _, err := h.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The host dies while its handler runs.
	f.frozen.Store(true)

	deadline := claimed.Add(lease + 10*time.Second)
	var last idemstore.Result
	won := false
	for time.Now().Before(deadline) {
		res, err := claimOnce(ctx, live, claimFor("k1", "tok-retry", time.Minute), inTx)
		if err != nil {
			t.Fatalf("retry's claim: %v", err)
		}
		last = res
		if res.Won {
			won = true
			if since := time.Since(claimed); since < lease+5*time.Second {
				t.Errorf("the retry won the key %v after the dead host's claim, before its lease and 5 s had run out", since)
			}
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	f.thaw()
	if !won {
		t.Fatalf("%v after a dead host's claim with a lease of %v, its key still answers every retry as held (last: %+v)",
			time.Since(claimed), lease, last.Existing)
	}
	if !strings.Contains(logged.String(), "pgstore: ended a session that held a key past its lease") {
		t.Errorf("the end of the dead host's session was not logged: %s", logged.String())
	}
}

// A holder within its lease is never ended, however long it sits idle
// in its transaction past the 5 s that follow a lease, and however short
// the lease of the claims that meet it: it commits as it would have.
func TestALiveHolderWithinItsLeaseIsNotEnded(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	holder, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok-holder", time.Minute))
	if err != nil || !holder.Won {
		t.Fatalf("ClaimTx = %+v, %v", holder, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		// A retry of the request under a short lease, and another
		// request of the key.
		other := claimFor("k1", "tok-other", time.Second)
		other.Fingerprint = []byte("another body")
		for _, c := range []idemstore.Claim{claimFor("k1", "tok-retry", time.Second), other} {
			for _, inTx := range []bool{false, true} {
				res, err := claimOnce(ctx, s, c, inTx)
				if err != nil || res.Won {
					t.Fatalf("a claim of the held key = %+v, %v; want lost", res, err)
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Errorf("the holder's Commit, within its lease, after claims met it = %v, want nil", err)
	}
}

// A claim's transaction takes its lease's lock (badgeClass, -lease) with
// a try as it begins, which fails while another session holds that lock
// exclusively, as a handler of another tenant's request may. A holder
// that so began without its lease is not measured by the lease of the
// claim that meets it, which may be shorter than its own: it is not ended
// within its lease, and commits as it would have.
func TestAHolderThatBeganWithoutItsLeaseIsNotEnded(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	class, _ := pgstore.RequestBadge(idemstore.Claim{})

	const lease = time.Minute
	// acme's handler holds the lock that a claim of a minute's lease
	// takes shared as its transaction begins.
	blocker := wonClaimTx(t, s, tenantClaim("acme", "a-"+randomHex(4), "tok-acme"))
	if _, err := blocker.Driver().(pgx.Tx).Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, $2::int4)`,
		class, -int32(lease/time.Millisecond)); err != nil {
		t.Fatalf("handler's lock: %v", err)
	}

	// globex's request begins meanwhile, with a minute's lease.
	victim := tenantClaim("globex", "victim-"+randomHex(4), "tok-victim")
	victim.Lease = lease
	holder := wonClaimTx(t, s, victim)
	defer func() { _ = holder.Rollback(ctx) }()
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Driver().(pgx.Tx).Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the holder's first statement: %v", err)
	}

	// globex's handler waits on a slow downstream for 7 s, within its
	// minute, while another operation of the same scope, whose lease is a
	// second, is sent the same key.
	time.Sleep(7 * time.Second)
	other := victim
	other.Operation, other.Token, other.Lease = "ping", "tok-other", time.Second
	other.Fingerprint = []byte("ping")
	for _, inTx := range []bool{false, true} {
		if res, err := claimOnce(ctx, s, other, inTx); err != nil || res.Won {
			t.Fatalf("the other operation's claim of the held key = %+v, %v; want lost", res, err)
		}
	}
	if _, err := holder.Driver().(pgx.Tx).Exec(ctx, `SELECT 1`); err != nil {
		t.Errorf("the holder, 7 s into its lease of %v, lost its session to another claim of its key: %v", lease, err)
	}
	if err := holder.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Errorf("the holder's Commit, within its lease = %v, want nil", err)
	}
}
