package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// stageFormat is the text of StageEffect's INSERT as pgstore's source
// has it, %s the outbox's table.
const stageFormat = `INSERT INTO %s (tenant, scope, key, effect_key, name, payload)
VALUES ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.bytea)
ON CONFLICT (tenant, effect_key) WHERE state OPERATOR(pg_catalog.=) 'pending' DO NOTHING
RETURNING tableoid`

// The outbox rows a handler's transaction commits are those Stage
// inserted, under the request's stored identity (docs/semantics.md §7.2,
// §8.3): the end of the transaction counts the outbox's inserts against
// the effects StageEffect reports staged. StageEffect sends its INSERT
// through pgx on the handler's transaction, and pgx runs a statement
// prepared under a name in place of any query whose text is that name. A
// handler prepares, under the text of StageEffect's INSERT (the text is
// pgstore's source), a statement that inserts nothing and answers the
// outbox's oid: StageEffect counts an effect staged, and the handler's
// own INSERT of an effect under globex's identity is the one insert the
// end finds. acme's request would commit, and a runner deliver globex an
// effect no request of globex's staged. Prepare refuses the name
// (ErrPreparedName), and StageEffect's INSERT does not go through pgx's
// lookup by name (pgstore's own tests prepare the name unchecked).
func TestAStatementPreparedUnderStagesTextCountsAsStaged(t *testing.T) {
	ctx := context.Background()
	rp, schema := rolePool(t)
	store := pgstore.New(rp)
	table := pgx.Identifier{schema, "idempotency_outbox"}
	stageSQL := fmt.Sprintf(stageFormat, table.Sanitize())

	claim := func(key string) (idemstore.Identity, idemstore.Tx) {
		id := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: key}
		c := idemstore.Claim{Identity: id, Operation: "createOrder", Fingerprint: make([]byte, 32), Token: "tok-" + key,
			Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover}
		res, tx, err := store.ClaimTx(ctx, c)
		if err != nil || !res.Won {
			t.Fatalf("claim = %+v, %v", res, err)
		}
		return id, tx
	}

	id, tx := claim("m1")
	h := tx.Driver().(pgx.Tx)
	if _, err := h.Prepare(ctx, stageSQL, `SELECT pg_catalog.to_regclass('`+table.Sanitize()+`')::pg_catalog.oid
 WHERE $1::pg_catalog.text IS NOT NULL AND $2::pg_catalog.text IS NOT NULL AND $3::pg_catalog.text IS NOT NULL
   AND $4::pg_catalog.text IS NOT NULL AND $5::pg_catalog.text IS NOT NULL AND $6::pg_catalog.bytea IS NOT NULL`); err == nil {
		t.Error("Prepare under StageEffect's text as its name: no error; want ErrPreparedName")
	} else if !errors.Is(err, pgstore.ErrPreparedName) {
		_ = tx.Rollback(ctx)
		t.Fatalf("Prepare under StageEffect's text: %v", err)
	}
	staged, err := pgstore.StageEffect(ctx, h, table, id, "m1-receipt", "receipt", []byte("x"))
	t.Logf("StageEffect = %v, %v", staged, err)
	if _, err := h.Exec(ctx, `INSERT INTO `+table.Sanitize()+` (tenant, scope, key, effect_key, name, payload)
VALUES ('globex', '', 'v1', 'forged-effect', 'refund', '\x00')`); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatal(err)
	}
	acme := tx.Commit(ctx, idemstore.Response{Status: 201})
	t.Logf("acme's Commit: %v", acme)

	due, err := newOutbox(rp).Claim(ctx, 10, time.Minute, "runner")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range due {
		if m.Tenant != "acme" {
			t.Errorf("a runner delivers effect %q (%s) as tenant %s's, key %q, which no request of that tenant staged: acme's handler "+
				"prepared a statement under the text of StageEffect's INSERT, and its request committed (%v)", m.EffectKey, m.Name, m.Tenant, m.Key, acme)
		}
	}
}
