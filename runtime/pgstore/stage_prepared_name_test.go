package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// StageEffect's INSERT is sent as pgstore's own message, which pgx does
// not look up among the statements prepared on the connection by name
// (docs/semantics.md §7.2, §8.3). A statement prepared under the
// INSERT's text (unchecked: Prepare refuses the name, ErrPreparedName),
// one that inserts nothing and answers the outbox's oid, does not run in
// its place: the effect is staged, and the handler's own INSERT of an
// effect under globex's identity fails the end's check.
func TestStageEffectIgnoresAStatementPreparedUnderItsText(t *testing.T) {
	ctx := context.Background()
	s, pool := newStore(t)
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{schema, "idempotency_outbox"}
	c := tenantClaim("acme", "m1", "tok-acme")
	tx := wonClaimTx(t, s, c)
	h := tx.Driver().(pgx.Tx)
	if err := pgstore.PrepareUnchecked(ctx, h, pgstore.StageSQL(table), `SELECT pg_catalog.to_regclass('`+table.Sanitize()+`')::pg_catalog.oid
 WHERE $1::pg_catalog.text IS NOT NULL AND $2::pg_catalog.text IS NOT NULL AND $3::pg_catalog.text IS NOT NULL
   AND $4::pg_catalog.text IS NOT NULL AND $5::pg_catalog.text IS NOT NULL AND $6::pg_catalog.bytea IS NOT NULL`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if ok, err := pgstore.StageEffect(ctx, h, table, c.Identity, "m1-receipt", "receipt", []byte("x")); !ok || err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("StageEffect = %v, %v; want staged", ok, err)
	}
	if _, err := h.Exec(ctx, `INSERT INTO `+table.Sanitize()+` (tenant, scope, key, effect_key, name, payload)
VALUES ('globex', '', 'v1', 'forged-effect', 'refund', '\x00')`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err == nil {
		t.Error("acme's request committed an effect under globex's identity, counted as the one StageEffect staged")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d outbox rows committed; want none", n)
	}
}
