package pgoutbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A transactional handler of one tenant that puts a trigger on the
// outbox's table inside its own transaction must not have its
// request commit: docs/semantics.md §7.2 says that a transaction in which
// a trigger, a rule or a row security policy was made on the store's
// tables is not committed. The end of a transaction watches only
// idempotency_keys, so the trigger below commits, outlives the request
// and silently drops every effect another tenant stages afterwards: that
// tenant's request commits its write and answers 201, Stage says the
// effect was staged, and no runner ever sees it (a lost effect, docs/semantics.md §8.3).
func TestAHandlersTriggerOnTheOutboxLosesAnotherTenantsEffect(t *testing.T) {
	cases := map[string]string{
		"trigger": `CREATE FUNCTION {schema}.drop_effect() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.idempotency_outbox WHERE id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER drop_effect AFTER INSERT ON {schema}.idempotency_outbox
    FOR EACH ROW WHEN (NEW.tenant <> 'acme') EXECUTE FUNCTION {schema}.drop_effect()`,
	}
	for name, evil := range cases {
		t.Run(name, func(t *testing.T) {
			schema := newSchema(t)
			ctx := context.Background()
			pool := openPool(t, schema)
			t.Cleanup(pool.Close)
			store := pgstore.New(pool)
			ob := pgoutbox.New(pool, idemoutbox.Options{})
			var stageErr error
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				tx, err := idem.TxFor[pgx.Tx](ctx, "createOrder")
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				if r.Header.Get("X-Evil") != "" {
					if _, err := tx.Exec(ctx, strings.ReplaceAll(evil, "{schema}", schema)); err != nil {
						http.Error(w, err.Error(), 500)
						return
					}
				}
				key := r.Header.Get("Idempotency-Key")
				if _, err := tx.Exec(ctx, "INSERT INTO orders (marker) VALUES ($1)", key); err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				if stageErr = ob.Stage(ctx, "receipt", []byte(key)); stageErr != nil {
					http.Error(w, stageErr.Error(), http.StatusUnprocessableEntity)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})
			engine, err := idem.New(idem.Config{
				Store: store,
				Policies: []idem.Policy{idemtest.Policy("createOrder", "/orders", func(p *idem.Policy) {
					p.Lease, p.OnLeaseExpiry, p.Transactional = 5*time.Second, idemstore.Takeover, true
				})},
				Tenant: func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true },
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(engine.Middleware(h))
			t.Cleanup(srv.Close)
			post := func(tenant, key string, evil bool) int {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("X-Tenant", tenant)
				if evil {
					req.Header.Set("X-Evil", "1")
				}
				res, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res.StatusCode
			}
			acme := post("acme", "m1", true)
			t.Logf("acme's request that made the %s: %d", name, acme)
			globex := post("globex", "v1", false)
			var orders int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE marker = 'v1'").Scan(&orders); err != nil {
				t.Fatal(err)
			}
			ms, err := ob.List(ctx, idemoutbox.Query{Tenant: "globex"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("globex: status %d, Stage error %v, orders committed %d, effects in the outbox %d", globex, stageErr, orders, len(ms))
			if globex == http.StatusCreated && stageErr == nil && orders == 1 && len(ms) == 0 {
				t.Errorf("another tenant's request committed its write and answered %d, Stage said its effect was staged, but the outbox holds none: "+
					"acme's %s on the outbox table (its request answered %d) committed and drops it", globex, name, acme)
			}
		})
	}
}
