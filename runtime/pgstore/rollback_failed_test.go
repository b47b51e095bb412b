package pgstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler whose statement failed (a unique violation it answers 409 for,
// a division by zero) leaves its transaction aborted, where PostgreSQL
// parses nothing but the statement that ends it. On a connection that has
// not yet ended a transaction, pgstore's own ending statements are not yet
// prepared there: its ROLLBACK goes first, and they are prepared behind it.
// The Rollback succeeds, logs nothing, frees the key and keeps the
// connection, on a fresh connection and on one that has ended transactions
// before.
func TestARollbackAfterAFailedStatementSucceedsOnAFreshConnection(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		name := "keyless"
		if keyed {
			name = "keyed"
		}
		t.Run(name, func(t *testing.T) {
			var logged bytes.Buffer
			pool := openPool(t, newSchema(t), func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
			s := pgstore.New(pool, pgstore.WithLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))))
			ctx := context.Background()
			var pid uint32
			for i, fresh := range []string{"a fresh connection", "a connection that has ended one before"} {
				key := "f-" + randomHex(4)
				var tx idemstore.Tx
				var err error
				if keyed {
					var res idemstore.Result
					res, tx, err = s.ClaimTx(ctx, claimFor(key, "tok", time.Minute))
					if err == nil && !res.Won {
						t.Fatalf("claim lost: %+v", res)
					}
				} else {
					tx, err = s.Begin(ctx, time.Minute)
				}
				if err != nil {
					t.Fatal(err)
				}
				h := tx.Driver().(pgx.Tx)
				var now uint32
				if err := h.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&now); err != nil {
					t.Fatal(err)
				}
				if i > 0 && now != pid {
					t.Errorf("on %s: backend %d, want %d: the first Rollback closed its connection", fresh, now, pid)
				}
				pid = now
				if _, err := h.Exec(ctx, `SELECT 1/0`); err == nil {
					t.Fatal("1/0 did not fail")
				}
				if err := tx.Rollback(ctx); err != nil {
					t.Errorf("on %s: Rollback after the handler's failed statement = %v, want nil", fresh, err)
				}
				if l := unexpectedLines(logged.String()); l != "" {
					t.Errorf("on %s: Rollback after the handler's failed statement logged %s", fresh, l)
				}
				logged.Reset()
				if keyed {
					if res, err := s.Claim(ctx, claimFor(key, "tok-retry", time.Minute)); err != nil || !res.Won {
						t.Errorf("on %s: the retry's claim after the Rollback = %+v, %v; want won", fresh, res, err)
					}
				}
			}
		})
	}
}

// unexpectedLines are the lines of log but the store's warning that the
// tests' role is a superuser.
func unexpectedLines(log string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if l != "" && !strings.Contains(l, "the database role is a superuser") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
