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

// A handler that answers a status that is not kept undoes its writes
// (docs/semantics.md §5), and a call of the handler's still running when
// its transaction ends never gets past the engine's checks
// (docs/semantics.md §7.2). When the handler wrote nothing, the release
// of its claim is written inside its own held transaction and committed
// there (Rollback, releaseInside).
// A goroutine the handler left behind that writes through the transaction
// at that moment, after the engine took it back, is committed with the
// release: the key is free for a retry, which runs the handler again,
// while the abandoned run's write stands. Here the goroutine waits only
// until the engine has taken the transaction back, as one that was slower
// than its handler would.
func TestLateWriteIsNotCommittedWithTheRelease(t *testing.T) {
	s := turnStore(t)
	committed := lateWrites(t, s, "late",
		func(st *storeTx) func(key string) error {
			return func(key string) error {
				_, err := st.h.ExecContext(context.Background(), `INSERT INTO effects (marker) VALUES (?)`, key)
				if !errors.Is(err, sql.ErrTxDone) {
					t.Errorf("the late write returned %v; want an error that wraps sql.ErrTxDone", err)
				}
				return err
			}
		},
		// The handler answered 500 without having written: the engine
		// releases the claim.
		func(tx idemstore.Tx) error { return tx.Rollback(context.Background()) })
	if committed > 0 {
		t.Errorf("in %d of %d released claims a write the handler's goroutine made after the engine took its transaction back was committed with the release: the key is free for a retry that runs the handler again, and the abandoned run's write stands", committed, lateTries)
	}
}

// A statement the handler prepared is the handler's too: a goroutine it
// left behind that runs it once the engine has taken the transaction back
// to commit the completion runs no checks (the authorizer saw the
// statement when it was prepared) and, run before the engine's COMMIT,
// would be committed with the completion, a write the handler made after
// its answer was fixed. The engine closes the handler's statements before
// it writes the completion.
func TestLatePreparedWriteIsNotCommittedWithTheCompletion(t *testing.T) {
	s := turnStore(t)
	committed := lateWrites(t, s, "prepared",
		func(st *storeTx) func(key string) error {
			stmt, err := st.h.PrepareContext(context.Background(), `INSERT INTO effects (marker) VALUES (?)`)
			if err != nil {
				t.Fatal(err)
			}
			return func(key string) error {
				_, err := stmt.ExecContext(context.Background(), key)
				return err
			}
		},
		func(tx idemstore.Tx) error { return tx.Commit(context.Background(), idemstore.Response{Status: 201}) })
	if committed > 0 {
		t.Errorf("in %d of %d completions a write through a statement the handler prepared, run by its goroutine after the engine took the transaction back, was committed with the completion", committed, lateTries)
	}
}

// lateTries is how many claims lateWrites makes: the late write falls
// between the engine's taking the transaction back and its COMMIT in a
// tenth of them or more without the exclusion.
const lateTries = 200

// lateWrites claims lateTries keys with prefix. For each, while the
// handler owns the transaction, prepare returns the handler's write,
// which a goroutine runs once the engine has taken the transaction back
// as end ends it. It reports how many of the writes were committed.
func lateWrites(t *testing.T, s *Store, prefix string, prepare func(st *storeTx) func(key string) error, end func(idemstore.Tx) error) int {
	t.Helper()
	ctx := context.Background()
	committed := 0
	for i := range lateTries {
		c := turnClaim(fmt.Sprintf("%s-%d", prefix, i), time.Minute)
		res, itx, err := s.ClaimTx(ctx, c)
		if err != nil || !res.Won {
			t.Fatalf("ClaimTx = %+v, %v", res, err)
		}
		st := itx.(*storeTx)
		write := prepare(st)
		wrote := make(chan error, 1)
		go func() {
			afterHandler(st)
			wrote <- write(c.Key)
		}()
		if err := end(itx); err != nil {
			t.Fatalf("the end of the transaction: %v", err)
		}
		werr := <-wrote
		if effectsMarked(t, s, c.Key) > 0 {
			committed++
			if committed <= 3 {
				t.Logf("try %d: the late write returned %v and was committed", i, werr)
			}
		}
	}
	return committed
}

// afterHandler waits until the engine has taken st back from its handler.
func afterHandler(st *storeTx) {
	for st.handlerOwns.Load() {
		// spin: the goroutine keeps its processor, as a busy one would
	}
}

// The authorizer refuses a handler's trigger on the store's tables
// (docs/semantics.md §7.2) only while the handler owns its transaction.
// A goroutine the handler left behind that makes one once the engine has
// taken the transaction back, to commit it or to release its claim inside
// it, passes, and the trigger is committed with the completion or the
// release. A trigger that puts every completed row back in flight then
// acts on every tenant's completions: each client gets its answer, and
// each retry after the lease takes the key over and runs the handler again.
func TestLateTriggerIsNotCommittedWithTheEnd(t *testing.T) {
	const trigger = `CREATE TRIGGER undo_completions AFTER UPDATE OF state ON main.idempotency_keys
		WHEN new.state = 'completed'
		BEGIN UPDATE idempotency_keys SET state = 'in_flight' WHERE rowid = new.rowid; END`
	ends := map[string]struct {
		end func(ctx context.Context, tx idemstore.Tx) error
		// busy is a statement of the handler's goroutine still running
		// when the handler answers ("" for none: the handler wrote
		// nothing, and its claim is released inside its transaction).
		busy  string
		tries int
	}{
		"commit": {
			end: func(ctx context.Context, tx idemstore.Tx) error {
				return tx.Commit(ctx, idemstore.Response{Status: 201})
			},
			busy:  `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT count(*) FROM c`,
			tries: 5,
		},
		"release": {
			end:   func(ctx context.Context, tx idemstore.Tx) error { return tx.Rollback(ctx) },
			tries: 200,
		},
	}
	for name, e := range ends {
		t.Run(name, func(t *testing.T) {
			s := turnStore(t)
			ctx := context.Background()
			for i := range e.tries {
				c := turnClaim("trigger-"+string(rune('a'+i)), time.Minute)
				res, itx, err := s.ClaimTx(ctx, c)
				if err != nil || !res.Won {
					t.Fatalf("ClaimTx = %+v, %v", res, err)
				}
				st := itx.(*storeTx)
				made, started := make(chan error, 1), make(chan struct{})
				go func() {
					if e.busy != "" {
						close(started)
						if _, err := st.h.ExecContext(ctx, e.busy); err != nil {
							made <- err
							return
						}
					}
					afterHandler(st)
					_, err := st.h.ExecContext(ctx, trigger)
					made <- err
				}()
				if e.busy != "" {
					<-started
					time.Sleep(10 * time.Millisecond)
				}
				endErr := e.end(ctx, itx)
				merr := <-made
				var triggers int
				if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM main.sqlite_schema WHERE type = 'trigger' AND tbl_name = 'idempotency_keys'`).Scan(&triggers); err != nil {
					t.Fatal(err)
				}
				if triggers > 0 {
					var state string
					_ = s.DB().QueryRowContext(ctx, `SELECT state FROM idempotency_keys WHERE key = ?`, c.Key).Scan(&state)
					t.Fatalf("try %d: a trigger on idempotency_keys that the handler's goroutine made after the engine took its transaction back (%v) was committed with its %s (%v); the key's row is now %q, and every completion from now on is put back in flight",
						i, merr, name, endErr, state)
				}
			}
		})
	}
}

// effectsMarked counts the rows of the test's effects table that carry
// marker: the writes of a handler's that were committed.
func effectsMarked(t *testing.T, s *Store, marker string) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM effects WHERE marker = ?`, marker).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
