package pgoutbox_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// stagedBehind runs one transactional request whose handler writes an
// order, runs shadow on its transaction, and stages an effect. It returns
// the handler's Stage error, the orders committed, and the effects the
// outbox (the runner's table) holds for the key.
func stagedBehind(t *testing.T, schema string, shadow string) (orders, staged, status int, stageErr error) {
	t.Helper()
	ctx := context.Background()
	pool := openPool(t, schema)
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	ob := pgoutbox.New(pool, idemoutbox.Options{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, err := idem.TxFor[pgx.Tx](ctx, "createOrder")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders (marker) VALUES ('k1')"); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if _, err := tx.Exec(ctx, shadow); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		stageErr = ob.Stage(ctx, "receipt", []byte("k1"))
		if stageErr != nil {
			http.Error(w, stageErr.Error(), http.StatusUnprocessableEntity)
			return
		}
		enginetest.Created(w, "k1")
	})
	es := enginetest.ServeEngine(t, store, h,
		enginetest.EnginePolicy("createOrder", "/orders", 5*time.Second, idemstore.Takeover, true))
	a := es.MustPost(t, "/orders", "k1", `{"item":"book"}`)
	es.Close()
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE marker = 'k1'").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	ms, err := ob.List(ctx, idemoutbox.Query{})
	if err != nil {
		t.Fatal(err)
	}
	return orders, len(ms), a.Status, stageErr
}

// A transactional handler that, on its own transaction, makes the outbox's
// table name another relation (a temporary table created like it) must
// not have its staged effect go there, never delivered while its request
// commits: a staged effect exists if and only if the request's writes
// committed (docs/semantics.md §8.3), and nothing a handler creates makes
// a store's table name another relation for the statements the engine
// runs on its session (docs/semantics.md §7.2).
func TestStageIgnoresATemporaryOutbox(t *testing.T) {
	schema := newSchema(t)
	orders, staged, status, err := stagedBehind(t, schema,
		"CREATE TEMPORARY TABLE idempotency_outbox (LIKE "+schema+".idempotency_outbox INCLUDING ALL) ON COMMIT DROP")
	t.Logf("status %d, stage error %v, orders committed %d, effects in the outbox %d", status, err, orders, staged)
	if err == nil && orders == 1 && staged == 0 {
		t.Errorf("the request committed its write (status %d) and Stage said the effect was staged, but the outbox holds no effect: it went to the handler's temporary table", status)
	}
}

// The same through a search_path a schema-per-tenant application sets for
// its own tables, where the tenant's schema has an outbox table of its
// own: the key's table still resolves to the store's (the engine checks
// it), the outbox's does not.
func TestStageIgnoresTheHandlersSearchPath(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	other := schema + "_tenant"
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+other+"; CREATE TABLE "+other+".idempotency_outbox (LIKE "+schema+".idempotency_outbox INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), testURL(t))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+other+" CASCADE")
			c.Close(context.Background())
		}
	})
	orders, staged, status, err := stagedBehind(t, schema, "SET LOCAL search_path = "+other+", "+schema)
	t.Logf("status %d, stage error %v, orders committed %d, effects in the outbox %d", status, err, orders, staged)
	if err == nil && orders == 1 && staged == 0 {
		t.Errorf("the request committed its write (status %d) and Stage said the effect was staged, but the runner's outbox holds no effect: it went to %s.idempotency_outbox", status, other)
	}
}
