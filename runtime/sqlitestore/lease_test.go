package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// A handler statement still running when its transaction's lease ends is
// interrupted, as PostgreSQL's statement_timeout ends one there: it holds
// SQLite's only write lock, and every other write waited on it for as long
// as the handler's own context allowed.
func TestStatementPastTheLeaseIsInterrupted(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	tx, h := beginWithEffects(t, s, lease)
	if _, err := h.ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('hung')`); err != nil {
		t.Fatal(err)
	}
	// A statement that never ends on its own, under a context that never
	// ends either; the test's own bound only keeps a failure from hanging.
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		var n int64
		done <- h.QueryRowContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c`).Scan(&n)
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an endless statement returned no error")
		}
		if took := time.Since(start); took > lease+2*time.Second {
			t.Errorf("the statement ended %v after it began, want about the lease (%v)", took, lease)
		}
	case <-time.After(lease + 5*time.Second):
		t.Fatalf("the statement still runs %v past its transaction's lease", 5*time.Second)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
		t.Error("Commit of a transaction past its lease succeeded")
	}
	other, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatalf("Begin after the interrupted statement: %v", err)
	}
	if _, err := other.Driver().(*sqlitestore.Tx).ExecContext(ctx, `INSERT INTO effects (marker) VALUES ('after')`); err != nil {
		t.Fatalf("write after the interrupted statement: %v", err)
	}
	if err := other.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("Commit after the interrupted statement: %v", err)
	}
	if n := countMarker(t, s, "hung"); n != 0 {
		t.Errorf("the interrupted transaction's write was kept (%d)", n)
	}
}
