package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// No statement of a handler's runs after its transaction has ended, outside
// every check (docs/semantics.md §7.2), and a handler that ended or
// tampered with its transaction leaves its key failed closed
// (docs/semantics.md §5.4).
// pgx runs a statement prepared under a name in place of any query whose
// text is that name, whatever the query's execution mode. A handler that
// could prepare under the text of one of the statements settle sends on
// its own session once the transaction is rolled back (the reset of the
// session, the key's failing closed), and then made its end's check fail
// (here by setting the transaction's mark again), would have settle run
// its statement instead, in autocommit, as the store's role, deleting
// globex's completed key, whose retry would run its handler a second
// time. Prepare refuses such a name (ErrPreparedName); with the name
// prepared all the same (unchecked), settle sends its statements as its
// own messages, which pgx does not look up by name, and globex's key
// stays.
func TestAHandlersStatementNamedAsSettlesRunsAfterTheRollback(t *testing.T) {
	for name, st := range pgstore.SettleStatements {
		for _, unchecked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unchecked=%v", name, unchecked), func(t *testing.T) {
				settlePreparedName(t, name, st.SQL, st.Params, unchecked)
			})
		}
	}
}

func settlePreparedName(t *testing.T, name, sql string, types []string, unchecked bool) {
	r := newRoleStore(t, "{schema}")
	s := pgstore.New(r.pool())
	ctx := context.Background()

	globex := tenantClaim("globex", "v1", "tok-globex")
	if !runCharge(t, s, globex, r.replace(`INSERT INTO {schema}.effects (marker) VALUES ('globex-charge')`)) {
		t.Fatal("globex's first claim lost")
	}

	tx := wonClaimTx(t, s, tenantClaim("acme", "m1", "tok-acme"))
	h := tx.Driver().(pgx.Tx)
	params := make([]string, len(types))
	for i, typ := range types {
		params[i] = fmt.Sprintf("$%d::pg_catalog.%s IS NULL", i+1, typ)
	}
	body := r.replace(`WITH d AS (DELETE FROM {schema}.idempotency_keys WHERE tenant = 'globex' RETURNING 1) SELECT pg_catalog.count(*) FROM d`)
	if len(params) > 0 {
		body += ` WHERE NOT (` + strings.Join(params, " AND ") + `)`
	}
	var err error
	if unchecked {
		err = pgstore.PrepareUnchecked(ctx, h, sql, body)
	} else if _, err = h.Prepare(ctx, sql, body); errors.Is(err, pgstore.ErrPreparedName) {
		err = nil
	} else if err == nil {
		t.Errorf("Prepare under the text of settle's %s as its name: no error; want ErrPreparedName", name)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("Prepare under the name of settle's statement: %v", err)
	}
	if _, err := h.Exec(ctx, `SELECT pg_catalog.set_config('idemgen.transaction', 'another', true)`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	acme := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", acme)

	var n int
	if err := r.admin.QueryRow(ctx, r.replace(`SELECT count(*) FROM {schema}.idempotency_keys WHERE tenant = 'globex'`)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("globex's completed key was deleted by acme's statement, prepared under the name of settle's %s and run by settle "+
			"after acme's transaction was rolled back", name)
	}
	r.wantReplayOn(t, s, globex, "globex-charge", acme)
}
