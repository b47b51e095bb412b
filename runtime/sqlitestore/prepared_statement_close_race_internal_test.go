package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Once the engine has taken a handler's transaction back to end it,
// every later call of the handler's fails, and so does every statement
// the handler prepared (docs/semantics.md §7.2, docs/runtime.md
// "Transactional mode"): nothing of the handler's runs beside the
// completion or commits with it. A goroutine the handler left behind
// that sees its calls refused and runs one of its prepared statements at
// once must find it closed: when the refusal began before the statements
// were closed, one after the other, such a statement ran in the
// transaction and its write was committed with the completion.
func TestPreparedStatementRunsAfterCallsAreRefused(t *testing.T) {
	s := turnStore(t)
	ctx := context.Background()
	const tries, stmts = 20, 2000
	committed := 0
	for i := range tries {
		c := turnClaim(fmt.Sprintf("close-race-%d", i), time.Minute)
		res, itx, err := s.ClaimTx(ctx, c)
		if err != nil || !res.Won {
			t.Fatalf("ClaimTx = %+v, %v", res, err)
		}
		h := itx.Driver().(*Tx)
		var last *sql.Stmt
		for range stmts {
			if last, err = h.PrepareContext(ctx, `INSERT INTO effects (marker) VALUES (?)`); err != nil {
				t.Fatal(err)
			}
		}
		ready, wrote := make(chan struct{}), make(chan error, 1)
		go func() {
			close(ready)
			// The handler's goroutine runs on; it notices the end by its
			// calls' refusal.
			for {
				if _, err := h.ExecContext(ctx, `SELECT 1`); errors.Is(err, sql.ErrTxDone) {
					break
				}
			}
			_, err := last.ExecContext(ctx, c.Key)
			wrote <- err
		}()
		<-ready
		time.Sleep(time.Millisecond)
		if err := itx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		werr := <-wrote
		if effectsMarked(t, s, c.Key) > 0 {
			committed++
			if committed == 1 {
				t.Logf("try %d: the prepared statement run after the refusal returned %v", i, werr)
			}
		}
	}
	if committed > 0 {
		t.Errorf("in %d of %d completions a statement the handler prepared, run by its goroutine after its calls on *sqlitestore.Tx were already refused with sql.ErrTxDone, ran in the transaction and its write was committed with the completion", committed, tries)
	}
}
