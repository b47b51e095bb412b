package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/templates"
)

// PL/pgSQL compiles idempotency_claim once per session, the first time
// the session calls it (or the first time after its pg_proc row
// changed), and keeps the compiled function for the session's life: its
// variables' types are looked up then, through the session's search_path,
// where the temporary schema comes before pg_catalog for type names, and
// nothing of a session's reset recompiles it. A handler that makes a
// temporary domain named timestamptz and calls idempotency_claim (any
// arguments, its transaction rolled back) leaves the session's function
// with v_now typed as a domain that is gone, and every claim that reaches
// the function on that connection, any tenant's, failing ("cache lookup
// failed for type") for as long as the connection lives (docs/semantics.md
// §7.2: nothing a handler leaves on its session reaches a later request on
// that connection). Here the handler's is the first call on its session, in a
// keyless transaction, or it follows a Migrate of another process that
// replaced the function while the handler ran, in a keyed one.
func TestAHandlersTemporaryTypeFailsNoLaterClaim(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "keyless, first call on the session"
		if keyed {
			name = "keyed, the function replaced meanwhile"
		}
		t.Run(name, func(t *testing.T) {
			s, pool := newStore(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
			ctx := context.Background()

			var (
				tx  idemstore.Tx
				err error
			)
			if keyed {
				tx = wonClaimTx(t, s, tenantClaim("acme", "a-"+randomHex(4), "tok-acme"))
			} else if tx, err = s.Begin(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			h := tx.Driver().(pgx.Tx)
			if _, err := h.Exec(ctx, `CREATE DOMAIN pg_temp.timestamptz AS pg_catalog.timestamp`); err != nil {
				_ = tx.Rollback(ctx)
				t.Fatal(err)
			}
			if keyed {
				// Another process starts, and Migrate replaces the
				// functions, on a session of its own.
				replaceClaimFunction(t, pool)
			}
			// The call compiles the function; a NULL lease fails its
			// insert on expires_at's NOT NULL before any row is written.
			_, cerr := h.Exec(ctx, `SELECT idempotency_claim('acme', 'x', 'x', 'x', '\x00'::bytea, 'x', NULL, NULL, true, false)`)
			t.Logf("the handler's call: %v", cerr)
			t.Logf("acme's Rollback: %v", tx.Rollback(ctx))

			// globex's requests, on the pool's one connection.
			for i, tx := range []bool{true, false} {
				res, err := claimOnce(ctx, s, tenantClaim("globex", "g-"+randomHex(4), "tok-"+randomHex(2)), tx)
				if err != nil || !res.Won {
					t.Errorf("globex's claim #%d (transactional %v) after acme's handler = %+v, %v; want won", i+1, tx, res, err)
				}
			}
		})
	}
}

// replaceClaimFunction runs the migration's CREATE OR REPLACE of
// idempotency_claim on a connection of its own, outside pool, as another
// process's Migrate does: it gives the function a new pg_proc row.
func replaceClaimFunction(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	up, _, err := templates.Schema("postgres")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(up, "CREATE OR REPLACE FUNCTION idempotency_claim(")
	end := strings.Index(up[max(start, 0):], "\n$$;")
	if start < 0 || end < 0 {
		t.Fatal("the migration creates no idempotency_claim")
	}
	if _, err := c.Exec(ctx, up[start:start+end+len("\n$$;")]); err != nil {
		t.Fatalf("CREATE OR REPLACE FUNCTION idempotency_claim: %v", err)
	}
}

// A connection pgstore pools after a handler's transaction is the same
// one, not a new one, where nothing replaced the function: the check
// above closes only a connection whose function a handler may have had
// compiled anew.
func TestAHandlersTransactionKeepsItsConnection(t *testing.T) {
	s, pool := newStore(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 1 })
	ctx := context.Background()
	pid := func() (p uint32) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT pg_catalog.pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := pid()
	for i := range 3 {
		tx, err := s.Begin(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx, idemstore.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
		tx = wonClaimTx(t, s, tenantClaim("acme", "k-"+randomHex(4), "tok"))
		if i%2 == 0 {
			err = tx.Commit(ctx, idemstore.Response{Status: 201})
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := pid(); got != first {
		t.Errorf("the connection's backend after handlers' transactions = %d, want %d: a clean session was closed", got, first)
	}
}
