package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A handler that changes who its session runs as (SET ROLE, SET SESSION
// AUTHORIZATION) commits that with its transaction. The next request on
// the pooled connection must run as the connection's own user again, or it
// would act with another role's privileges, and row-level security would
// filter its rows as that role's. The role here is a superuser, so that the
// handler's transaction still ends as usual.
func TestHandlerRoleDoesNotReachThePool(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	admin := openPool(t, schema)
	role := "idem_handler_" + randomHex(4)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" SUPERUSER NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP ROLE "+role); err != nil {
			t.Errorf("DROP ROLE %s: %v", role, err)
		}
	})
	for _, stmt := range []string{"SET ROLE " + role, "SET SESSION AUTHORIZATION " + role} {
		for _, e := range txEndings() {
			t.Run(stmt+", "+e.name, func(t *testing.T) {
				// One connection: the next request gets the one the handler used.
				pool := openPool(t, schema, func(c *pgxpool.Config) { c.MaxConns = 1 })
				s := pgstore.New(pool)
				user := pool.Config().ConnConfig.User
				tx := e.begin(t, s, "k-"+randomHex(4))
				if _, err := tx.Driver().(pgx.Tx).Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
				if err := e.end(ctx, tx); err != nil {
					t.Fatalf("ending the transaction: %v", err)
				}
				var current, session string
				if err := pool.QueryRow(ctx, "SELECT current_user, session_user").Scan(&current, &session); err != nil {
					t.Fatal(err)
				}
				if current != user || session != user {
					t.Fatalf("the next request runs as current_user %q, session_user %q; want %q, the connection's user", current, session, user)
				}
			})
		}
	}
}
