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

// A handler's raw COMMIT, through any call of its pgx.Tx that takes SQL,
// committed what the handler had written before the end of the request
// could look at it. Each is refused before it is sent (docs/semantics.md
// §5.4): the handler's write stays uncommitted, the transaction rolls
// back whatever the handler answers, and the key is free again.
func TestAHandlersCommitIsRefusedOnEveryPath(t *testing.T) {
	paths := map[string]func(ctx context.Context, h pgx.Tx) error{
		"Exec": func(ctx context.Context, h pgx.Tx) error {
			_, err := h.Exec(ctx, "select 1; COMMIT")
			return err
		},
		"Exec with arguments": func(ctx context.Context, h pgx.Tx) error {
			_, err := h.Exec(ctx, "/* ; */ commit", pgx.QueryExecModeExec)
			return err
		},
		"Exec in the simple protocol": func(ctx context.Context, h pgx.Tx) error {
			_, err := h.Exec(ctx, "-- c\nCommit and chain", pgx.QueryExecModeSimpleProtocol)
			return err
		},
		"Query": func(ctx context.Context, h pgx.Tx) error {
			rows, err := h.Query(ctx, "END")
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			return err
		},
		"QueryRow": func(ctx context.Context, h pgx.Tx) error {
			return h.QueryRow(ctx, "select ';'; commit").Scan()
		},
		"SendBatch": func(ctx context.Context, h pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			b.Queue("COMMIT")
			return h.SendBatch(ctx, b).Close()
		},
		"Prepare, then Exec by name": func(ctx context.Context, h pgx.Tx) error {
			if _, err := h.Prepare(ctx, "finish", "COMMIT"); err != nil {
				return err
			}
			_, err := h.Exec(ctx, "finish")
			return err
		},
		"a rewriter": func(ctx context.Context, h pgx.Tx) error {
			_, err := h.Exec(ctx, "SELECT 1", rewriteTo("COMMIT"))
			return err
		},
		"a savepoint's Exec": func(ctx context.Context, h pgx.Tx) error {
			sp, err := h.Begin(ctx)
			if err != nil {
				return err
			}
			_, err = sp.Exec(ctx, "ROLLBACK AND CHAIN")
			_ = sp.Rollback(ctx)
			return err
		},
	}
	for name, run := range paths {
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := wonTx(t, s, "k1", "tok1")
			h := tx.Driver().(pgx.Tx)
			if err := writeEffect(ctx, h, "charge"); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatal(err)
			}
			if err := run(ctx, h); !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
				t.Errorf("the handler's COMMIT: %v; want ErrHandlerEndsTransaction", err)
			}
			// The handler answers as if it had succeeded.
			err := tx.Commit(ctx, idemstore.Response{Status: 201})
			if !errors.Is(err, pgstore.ErrHandlerEndsTransaction) || errors.Is(err, idemstore.ErrOutcomeUnknown) {
				t.Errorf("Commit = %v; want the transaction rolled back", err)
			}
			if n, err := countEffects(ctx, pool, "charge"); err != nil || n != 0 {
				t.Errorf("the handler's write committed %d times (%v); want 0", n, err)
			}
			res, tx2, err := s.ClaimTx(ctx, claimFor("k1", "tok2", time.Minute))
			if err != nil || !res.Won {
				t.Fatalf("the retry's claim = %+v, %v; want won: the key was released", res, err)
			}
			if err := tx2.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A handler that carries on after a refused statement commits nothing;
// one that gives up has its transaction rolled back as any failed
// handler's.
func TestARefusedCommitThenRollback(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	tx := wonTx(t, s, "k1", "tok1")
	h := tx.Driver().(pgx.Tx)
	if _, err := h.Exec(ctx, `INSERT INTO effects (marker) VALUES ('charge'); COMMIT`); !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
		t.Errorf("the handler's COMMIT: %v; want ErrHandlerEndsTransaction", err)
	}
	// A savepoint is the nested transaction's (Begin): the handler's own
	// SAVEPOINT, RELEASE and ROLLBACK TO are refused.
	for _, q := range []string{`SAVEPOINT s`, `RELEASE SAVEPOINT s`, `ROLLBACK TO SAVEPOINT s`} {
		if _, err := h.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); !errors.Is(err, pgstore.ErrHandlerEndsTransaction) {
			t.Errorf("%s: %v; want ErrHandlerEndsTransaction", q, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback = %v", err)
	}
	if n, err := countEffects(ctx, pool, "charge"); err != nil || n != 0 {
		t.Errorf("the handler's write committed %d times (%v); want 0", n, err)
	}
}

// rewriteTo is a QueryRewriter that sends sql instead.
type rewriteTo string

func (r rewriteTo) RewriteQuery(_ context.Context, _ *pgx.Conn, _ string, args []any) (string, []any, error) {
	return string(r), args, nil
}
