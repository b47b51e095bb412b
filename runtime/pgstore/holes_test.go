package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// txEnding is one way the engine ends a handler's transaction: a keyed one
// committed or released, a keyless one (Begin) committed or rolled back.
type txEnding struct {
	name  string
	begin func(t *testing.T, s *pgstore.Store, key string) idemstore.Tx
	end   func(ctx context.Context, tx idemstore.Tx) error
}

func txEndings() []txEnding {
	keyed := func(t *testing.T, s *pgstore.Store, key string) idemstore.Tx { return wonTx(t, s, key, "tok-"+key) }
	keyless := func(t *testing.T, s *pgstore.Store, _ string) idemstore.Tx {
		tx, err := s.Begin(context.Background(), time.Minute)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		return tx
	}
	commit := func(ctx context.Context, tx idemstore.Tx) error {
		return tx.Commit(ctx, idemstore.Response{Status: 201})
	}
	release := func(ctx context.Context, tx idemstore.Tx) error { return tx.Rollback(ctx) }
	return []txEnding{
		{"keyed Commit", keyed, commit},
		{"keyed Release", keyed, release},
		{"keyless Commit", keyless, commit},
		{"keyless Release", keyless, release},
	}
}

// The handler's pgx.Tx forwards LargeObjects to pgx's own transaction. The
// engine ends that transaction with statements of its own, so unless pgx's
// transaction object is closed too, a LargeObjects value kept past the
// handler (by a goroutine, say) still works on the connection after it went
// back to the pool: in autocommit, or inside another request's transaction.
func TestLargeObjectsEndWithTheTransaction(t *testing.T) {
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			s, pool := newStore(t)
			ctx := context.Background()
			tx := e.begin(t, s, "k1")
			lo := tx.Driver().(pgx.Tx).LargeObjects()
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending the transaction: %v", err)
			}
			oid, err := lo.Create(ctx, 0)
			if err == nil {
				var n int
				_ = pool.QueryRow(ctx, "SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1", oid).Scan(&n)
				_, _ = pool.Exec(ctx, "SELECT lo_unlink($1)", oid)
				t.Fatalf("a LargeObjects kept from the handler created large object %d (%d stored) after the transaction ended", oid, n)
			}
		})
	}
}

// A session-level setting made through the handler's transaction (SET
// without LOCAL, set_config(..., false), SET ROLE) commits with it and would
// stay on the pooled connection: SET SESSION default_transaction_isolation
// TO 'serializable' makes every later plain claim on that connection fail
// (idempotency_claim refuses to run outside READ COMMITTED), 503s for
// unrelated requests; search_path or an application setting that row-level
// security reads would carry over to the next request. The connection must
// come back as the pool handed it out, with the settings of its connection
// string.
func TestHandlerSessionStateDoesNotReachThePool(t *testing.T) {
	for _, e := range txEndings() {
		t.Run(e.name, func(t *testing.T) {
			// One connection: the next request gets the one the handler used.
			s, pool := newStore(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
			ctx := context.Background()
			var searchPath string
			if err := pool.QueryRow(ctx, "SHOW search_path").Scan(&searchPath); err != nil {
				t.Fatal(err)
			}
			tx := e.begin(t, s, "k1")
			ptx := tx.Driver().(pgx.Tx)
			for _, stmt := range []string{
				"SET SESSION default_transaction_isolation TO 'serializable'",
				// Still finds the store's functions, which the keyed Commit
				// calls on this session.
				"SELECT set_config('search_path', current_setting('search_path') || ', pg_temp', false)",
				"SELECT set_config('app.tenant', 'someone', false)",
				"SELECT pg_advisory_lock(42)",
				"LISTEN handler_channel",
			} {
				if _, err := ptx.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			if err := e.end(ctx, tx); err != nil {
				t.Fatalf("ending the transaction: %v", err)
			}
			if _, err := s.Claim(ctx, claimFor("k2", "tok2", time.Minute)); err != nil {
				t.Fatalf("a plain claim after a handler's SET SESSION: %v", err)
			}
			var path, tenant string
			var locks, listens int
			err := pool.QueryRow(ctx, `SELECT current_setting('search_path'),
				coalesce(current_setting('app.tenant', true), ''),
				(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
				(SELECT count(*) FROM pg_listening_channels())`).Scan(&path, &tenant, &locks, &listens)
			if err != nil {
				t.Fatal(err)
			}
			if path != searchPath || tenant != "" || locks != 0 || listens != 0 {
				t.Fatalf("the next request's session: search_path %q (want %q), app.tenant %q, %d advisory locks, %d channels listened to; want it as the pool handed it out",
					path, searchPath, tenant, locks, listens)
			}
		})
	}
}
