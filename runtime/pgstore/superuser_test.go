package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The isolation of a handler's transaction assumes that the store's role
// is not a superuser (docs/semantics.md §7.2), so a store whose
// connections log in as one says so, once, at WARN, when its first claim
// takes a connection; a store whose role is an ordinary one logs nothing.
func TestASuperuserRoleIsWarnedOfOnce(t *testing.T) {
	const line = "pgstore: the database role is a superuser"
	t.Run("superuser", func(t *testing.T) {
		pool := openPool(t, newSchema(t))
		var super bool
		if err := pool.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
			t.Fatal(err)
		}
		if !super {
			t.Skip("the test's role is not a superuser")
		}
		logs := claimsLog(t, pool)
		if n := strings.Count(logs, line); n != 1 || !strings.Contains(logs, "level=WARN") {
			t.Errorf("claims as a superuser logged %q %d times, want once at WARN:\n%s", line, n, logs)
		}
	})
	t.Run("not a superuser", func(t *testing.T) {
		r := newRoleStore(t, "{schema}")
		if logs := claimsLog(t, r.pool()); logs != "" {
			t.Errorf("claims as role %s, no superuser, logged:\n%s", r.role, logs)
		}
	})
}

// claimsLog makes a store on pool and claims three keys on it, and
// returns what the store logged.
func claimsLog(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var logs bytes.Buffer // written by the claims, in this goroutine
	s := pgstore.New(pool, pgstore.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for i := range 3 {
		if res, err := s.Claim(context.Background(), tenantClaim("acme", fmt.Sprint("k", i), "tok")); err != nil || !res.Won {
			t.Fatalf("claim %d: %+v, %v", i, res, err)
		}
	}
	return logs.String()
}
