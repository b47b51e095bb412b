package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// rawCommitLease is the lease of the raw-COMMIT kill test's claim: long
// enough for the child to reach its COMMIT, short enough to wait out.
const rawCommitLease = 500 * time.Millisecond

// helperRawCommit is the child of TestKillAfterHandlerRawCommit: on each
// of rawCommitKeys a transactional claim, whose handler writes and then
// commits the transaction itself with a raw COMMIT (claim row and write
// together); then it says so, and waits to be killed before the engine can
// see what the handlers did. The claim of k-raw-took takes over an
// abandoned plain claim; that of k-raw is new.
func helperRawCommit(t *testing.T, s *pgstore.Store) {
	ctx := context.Background()
	abandoned := claimFor("k-raw-took", "tok-abandoned", time.Millisecond)
	if res, err := s.Claim(ctx, abandoned); err != nil || !res.Won {
		t.Fatalf("child's plain Claim = %+v, %v", res, err)
	}
	time.Sleep(10 * time.Millisecond)
	for _, key := range rawCommitKeys {
		res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-child", rawCommitLease))
		if err != nil || !res.Won || res.TookOver != (key == "k-raw-took") {
			t.Fatalf("child ClaimTx of %s = %+v, %v", key, res, err)
		}
		if err := writeEffect(ctx, tx.Driver(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := pgstore.Unchecked(tx).Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("ready")
	time.Sleep(2 * time.Minute)
	t.Fatal("child was not killed")
}

// rawCommitKeys are the keys helperRawCommit claims.
var rawCommitKeys = []string{"k-raw", "k-raw-took"}

// kill -9 after a transactional handler committed on its own (a raw COMMIT
// through the transaction it was given): its write is durable, and so is
// its claim row, still in flight. While the process lived, its session
// locks kept every other claim away and its Commit would have left the key
// indeterminate; dead, it settles nothing. The engine cannot know whether
// the handler's effects committed, so the key is never taken over
// (docs/semantics.md §7.2): the retry after the lease meets it indeterminate, and
// the handler never runs again.
func TestKillAfterHandlerRawCommit(t *testing.T) {
	pool, s, cmd := startReadyChild(t, "rawcommit")
	ctx := context.Background()
	killChild(t, cmd)
	time.Sleep(rawCommitLease + 200*time.Millisecond)

	for _, key := range rawCommitKeys {
		res, tx, err := s.ClaimTx(ctx, claimFor(key, "tok-retry", rawCommitLease))
		if err != nil {
			t.Fatalf("retry's ClaimTx of %s: %v", key, err)
		}
		if res.Won {
			if err := writeEffect(ctx, tx.Driver(), key); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
				t.Fatalf("retry's Commit of %s: %v", key, err)
			}
			t.Errorf("%s: the retry took the key over (TookOver %v) from a handler that had committed on its own", key, res.TookOver)
		} else if res.Existing.State != idemstore.StateIndeterminate {
			t.Errorf("%s: the retry lost to a %q record, want indeterminate", key, res.Existing.State)
		}
		if n, err := countEffects(ctx, pool, key); err != nil || n != 1 {
			t.Errorf("%s: committed effects = %d, %v; want exactly 1 (the killed handler's)", key, n, err)
		}
	}
}
