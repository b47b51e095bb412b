package sqliteoutbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// sqlitestore's authorizer refuses a temporary table named
// idempotency_outbox; one made under another name and renamed to it
// (ALTER TABLE's argument is the old name, and ALTER TABLE is refused
// altogether now) would make Stage's unqualified INSERT write the
// temporary table, the request commit, and the effect never be
// delivered (docs/semantics.md §8.3: the row exists if and only if
// the request's writes committed).
func TestStageWritesMainsOutbox(t *testing.T) {
	ctx := context.Background()
	inst := open(t, newDB(t), 0)
	var stageErr error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := idem.TxFor[*sqlitestore.Tx](ctx, "createOrder")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		for _, q := range []string{
			`INSERT INTO orders (marker) VALUES ('k1')`,
			`CREATE TEMP TABLE scratch AS SELECT * FROM main.idempotency_outbox`,
			`CREATE UNIQUE INDEX temp.scratch_pending ON scratch (tenant, effect_key) WHERE state = 'pending'`,
			`ALTER TABLE temp.scratch RENAME TO idempotency_outbox`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
		}
		if stageErr = inst.Outbox.Stage(ctx, "receipt", []byte("k1")); stageErr != nil {
			http.Error(w, stageErr.Error(), http.StatusUnprocessableEntity)
			return
		}
		enginetest.Created(w, "k1")
	})
	es := enginetest.ServeEngine(t, inst.Store, h,
		enginetest.EnginePolicy("createOrder", "/orders", 5*time.Second, idemstore.Takeover, true))
	a := es.MustPost(t, "/orders", "k1", `{"item":"book"}`)
	es.Close()
	orders, err := inst.Count(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := inst.Outbox.List(ctx, idemoutbox.Query{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status %d, stage error %v, orders committed %d, effects in the outbox %d", a.Status, stageErr, orders, len(ms))
	if stageErr == nil && orders == 1 && len(ms) == 0 {
		t.Errorf("the request committed (status %d) and Stage said the effect was staged, but the outbox holds none", a.Status)
	}
}
