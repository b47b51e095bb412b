package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The completion that ends a handler's transaction (completeTxSQL) is
// parsed under the handler's search_path. sameTxSQL checks that the name
// idempotency_keys still resolves to the store's table, and "every
// function and operator is pg_catalog's" there; but the completion's own
// UPDATE compares with an unqualified "=", and falls back to an
// unqualified idempotency_complete. A search_path that puts a schema of
// the handler's in front of pg_catalog, holding an "=" for text that
// never holds and an idempotency_complete that does not raise, makes the
// completion update nothing and not fail: Commit succeeds, the handler's
// write commits, the key's row stays in flight, and the retry after the
// lease meets the key indeterminate (a transactional row fails closed), so
// the client that was told 201 gets 409 outcome-unknown where the contract
// promises the replay (docs/semantics.md §7.2: nothing a handler creates, a search_path
// included, answers for the statements that end its transaction).
func TestHandlersOperatorsAnswerForNoPartOfTheCompletion(t *testing.T) {
	s, pool := newStore(t)
	ctx := context.Background()
	evil := "idemtest_evil_" + randomHex(6)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+evil+" CASCADE") })
	const lease = 2 * time.Second
	res, tx, err := s.ClaimTx(ctx, claimFor("k1", "tok1", lease))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v", res, err)
	}
	h := tx.Driver().(pgx.Tx)
	var schema string
	if err := h.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	stmts := []string{
		`INSERT INTO effects (marker) VALUES ('charge')`,
		`CREATE SCHEMA {evil}`,
		`CREATE FUNCTION {evil}.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false'`,
		`CREATE OPERATOR {evil}.= (LEFTARG = text, RIGHTARG = text, FUNCTION = {evil}.never)`,
		`CREATE FUNCTION {evil}.idempotency_complete(text, text, text, text, integer, bytea, bytea, boolean) RETURNS void LANGUAGE sql AS ''`,
		`SET LOCAL search_path = {evil}, pg_catalog, {schema}`,
	}
	for _, q := range stmts {
		q = strings.NewReplacer("{evil}", evil, "{schema}", schema).Replace(q)
		if _, err := h.Exec(ctx, q); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatalf("%s: %v", q, err)
		}
	}
	commitErr := tx.Commit(ctx, idemstore.Response{Status: 201, Body: []byte(`{"ok":true}`)})
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE key = 'k1'`).Scan(&state); err != nil && err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	t.Logf("Commit: %v; the key's row then %q", commitErr, state)
	if commitErr == nil && state != string(idemstore.StateCompleted) {
		t.Errorf("Commit succeeded and the handler's write committed, yet the key's row is %q: the completion updated nothing", state)
	}
	time.Sleep(lease + 300*time.Millisecond)
	res, tx2, err := s.ClaimTx(ctx, claimFor("k1", "tok2", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Won {
		if _, err := tx2.Driver().(pgx.Tx).Exec(ctx, `INSERT INTO effects (marker) VALUES ('charge')`); err != nil {
			t.Fatal(err)
		}
		if err := tx2.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the retry after the lease: won %v, existing %q", res.Won, res.Existing.State)
	n, err := countEffects(ctx, pool, "charge")
	if err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("the handler's write committed %d times for one key (its Commit: %v; the key's row then %q; the retry after the lease won %v, took over %v)",
			n, commitErr, state, res.Won, res.TookOver)
	}
}
