package sqliteoutbox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// A staged effect carries its request's identity and payload, and its row
// exists if and only if its request's writes committed
// (docs/semantics.md §8.3); a handler's transaction may not change what
// another request stored (docs/semantics.md §7.2). Only Stage writes the outbox's table in
// a handler's transaction: request k2's own UPDATE of the payload of the
// effect request k1 staged, still pending, is refused, and so are its
// INSERT of an effect under k1's identity and its DELETE of k1's, while
// its own Stage stages its effect. (On PostgreSQL such a transaction does
// not commit.)
func TestAttackHandlerCannotRewriteAnotherRequestsStagedEffect(t *testing.T) {
	ctx := context.Background()
	inst := open(t, newDB(t), 0)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		key := r.Header.Get("Idempotency-Key")
		tx, err := idem.TxFor[*sqlitestore.Tx](ctx, "createOrder")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (marker) VALUES (?)`, key); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if key == "k2" {
			for _, q := range []string{
				`UPDATE idempotency_outbox SET payload = CAST('pay mallory' AS BLOB) WHERE key = 'k1'`,
				`DELETE FROM idempotency_outbox WHERE key = 'k1'`,
				`INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload, next_attempt_at, created_at)
				 SELECT tenant, scope, key, effect_key || '-2', name, CAST('pay mallory' AS BLOB), 0, 0
				   FROM idempotency_outbox WHERE key = 'k1'`,
			} {
				_, err := tx.ExecContext(ctx, q)
				t.Logf("k2's %.6s of k1's effect: %v", q, err)
			}
		}
		if err := inst.Outbox.Stage(ctx, "receipt", []byte("receipt for "+key)); err != nil {
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
			return
		}
		enginetest.Created(w, key)
	})
	es := enginetest.ServeEngine(t, inst.Store, h,
		enginetest.EnginePolicy("createOrder", "/orders", 5*time.Second, idemstore.Takeover, true))
	for _, k := range []string{"k1", "k2"} {
		if a := es.MustPost(t, "/orders", k, `{"item":"book"}`); a.Status != http.StatusCreated {
			t.Fatalf("%s = %d %s", k, a.Status, a.Body)
		}
	}
	es.Close()
	ms, err := inst.Outbox.List(ctx, idemoutbox.Query{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range ms {
		got[m.Key+" "+m.EffectKey] = string(m.Payload)
		if string(m.Payload) != "receipt for "+m.Key {
			t.Errorf("k1's staged effect %s carries %q, written by another request's handler", m.EffectKey, m.Payload)
		}
	}
	if len(ms) != 2 {
		t.Errorf("the outbox holds %v, want k1's effect and k2's", got)
	}
}

// StageEffect stages only in the transaction of a keyed request, under
// that request's identity: a handler that calls it itself cannot stage an
// effect as another request's, and a keyless transaction stages none.
func TestStageEffectIsTheRequestsOwn(t *testing.T) {
	ctx := context.Background()
	inst := open(t, newDB(t), 0)
	s := inst.Store.(*sqlitestore.Store)
	id := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: "k1"}
	_, held, err := s.ClaimTx(ctx, idemstore.Claim{
		Identity: id, Operation: "createOrder", Fingerprint: []byte{1}, Token: "k1",
		Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover,
	})
	if err != nil {
		t.Fatal(err)
	}
	other := idemstore.Identity{Tenant: "alice", Scope: "createOrder", Key: "k1"}
	if _, err := sqlitestore.StageEffect(ctx, held.Driver().(*sqlitestore.Tx), other, "e", "receipt", []byte("x"), time.Now()); !errors.Is(err, sqlitestore.ErrNoStaging) {
		t.Errorf("StageEffect under another identity = %v, want ErrNoStaging", err)
	}
	if ok, err := sqlitestore.StageEffect(ctx, held.Driver().(*sqlitestore.Tx), id, "e", "receipt", []byte("x"), time.Now()); !ok || err != nil {
		t.Errorf("StageEffect under the request's identity = %v, %v", ok, err)
	}
	if err := held.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	keyless, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keyless.Rollback(ctx) }()
	if _, err := sqlitestore.StageEffect(ctx, keyless.Driver().(*sqlitestore.Tx), id, "e", "receipt", []byte("x"), time.Now()); !errors.Is(err, sqlitestore.ErrNoStaging) {
		t.Errorf("StageEffect in a keyless transaction = %v, want ErrNoStaging", err)
	}
}
