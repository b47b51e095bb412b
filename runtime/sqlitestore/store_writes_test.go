package sqlitestore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/templates"
)

// tenantEngine serves a transactional createTransfer on s whose handler
// records one effect for its tenant and key and answers 201 "done
// <tenant>/<key>"; a request of tenant "mallory" also runs the statements
// in its X-Attack header through its transaction and answers 201 whatever
// they did, so that its transaction commits with its own completion.
func tenantEngine(t *testing.T, s *sqlitestore.Store) http.Handler {
	t.Helper()
	tenant := func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true }
	return attackEngineTenant(t, s, 30*time.Second, tenant, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		ctx := r.Context()
		who := r.Header.Get("X-Tenant") + "/" + r.Header.Get("Idempotency-Key")
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, who); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if q := r.Header.Get("X-Attack"); q != "" && r.Header.Get("X-Tenant") == "mallory" {
			_, err := tx.ExecContext(ctx, q)
			t.Logf("mallory's statement: %v", err)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("done " + who))
	}))
}

// postAs posts a transfer as tenant under key, with attack as its X-Attack
// header; an empty one is not sent.
func postAs(h http.Handler, tenant, key, attack string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
	r.Header.Set("Content-Type", "application/json")
	for name, v := range map[string]string{"X-Tenant": tenant, "Idempotency-Key": key, "X-Attack": attack} {
		if v != "" {
			r.Header.Set(name, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A handler's transaction may not change what another request stored
// (docs/semantics.md §7.2): SQLite's authorizer refuses a handler's
// UPDATE of main.idempotency_keys, which would otherwise commit with the
// handler's own completion and rewrite the stored answer of another
// tenant's key, for that tenant's retry to replay the forgery as her own.
func TestAttackHandlerCannotForgeAnotherTenantsStoredAnswer(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated || w.Body.String() != "done alice/a1" {
		t.Fatalf("alice's first request = %d %q", w.Code, w.Body)
	}
	w := postAs(h, "mallory", "m1", `UPDATE main.idempotency_keys
		SET body = CAST('pay mallory' AS BLOB), status = 200
		WHERE tenant = 'alice'`)
	if w.Code != http.StatusCreated {
		t.Fatalf("mallory's request = %d %q", w.Code, w.Body)
	}
	again := postAs(h, "alice", "a1", "")
	if again.Code != http.StatusCreated || again.Body.String() != "done alice/a1" {
		t.Errorf("alice's retry = %d %q (replayed %q), want her own 201 %q replayed: another tenant's handler rewrote her stored answer",
			again.Code, again.Body, again.Header().Get("Idempotent-Replayed"), "done alice/a1")
	}
}

// Nor may a handler delete another tenant's key (docs/semantics.md §7.2, §7.4): deleted,
// the completed key of alice's would run her handler again at her retry,
// which must replay. (A row in flight deleted so is another process's
// live claim, or durable mode's, whose claim commits before its handler.)
func TestAttackHandlerCannotDeleteAnotherTenantsKey(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's first request = %d %q", w.Code, w.Body)
	}
	if w := postAs(h, "mallory", "m1", `DELETE FROM main.idempotency_keys WHERE tenant = 'alice'`); w.Code != http.StatusCreated {
		t.Fatalf("mallory's request = %d %q", w.Code, w.Body)
	}
	again := postAs(h, "alice", "a1", "")
	if n := countMarker(t, s, "alice/a1"); n != 1 {
		t.Errorf("alice's key a1 ran %d times (retry = %d %q, replayed %q): another tenant's handler deleted her key",
			n, again.Code, again.Body, again.Header().Get("Idempotent-Replayed"))
	}
}

// Nor need the write be the handler's own statement: a trigger on a table
// the handlers write (effects), whoever made it (a handler of an earlier
// version's, which did not look at the triggers a handler made, or the
// application outside any request), fires inside every request's
// transaction that writes the table. SQLite asks the authorizer about a
// trigger's statements when it prepares the statement that fires it, and
// the authorizer of that request's transaction refuses them there:
// alice's write fails rather than rewrite her stored answers.
func TestAttackTriggerOnAHandlersTableCannotWriteTheStoresTables(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's first request = %d %q", w.Code, w.Body)
	}
	if _, err := s.DB().ExecContext(context.Background(), `CREATE TRIGGER steal AFTER INSERT ON effects
		BEGIN UPDATE idempotency_keys SET body = CAST('pay mallory' AS BLOB)
		      WHERE tenant = 'alice' AND state = 'completed'; END`); err != nil {
		t.Fatal(err)
	}
	if w := postAs(h, "alice", "a2", ""); w.Code == http.StatusCreated {
		t.Errorf("alice's second request, whose write fires the trigger = %d %q, want it refused", w.Code, w.Body)
	}
	again := postAs(h, "alice", "a1", "")
	if again.Body.String() != "done alice/a1" {
		t.Errorf("alice's retry of a1 = %d %q, want %q replayed: a trigger another tenant's handler left on its own table rewrote her stored answer",
			again.Code, again.Body, "done alice/a1")
	}
}

// Every table of the store's (the keys', the phases', the outbox's) is out
// of a handler's writes, whichever way it writes: a plain INSERT, UPDATE
// or DELETE, a trigger of its own table, an INSTEAD OF trigger of a view
// of its own, or a statement it prepared before it made the trigger,
// which SQLite prepares again, asking the authorizer, once the schema has
// changed. The store's tables are unchanged afterwards.
func TestAttackHandlerCannotWriteTheStoresTables(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		stmts []string
		// prepared, when set, is prepared before stmts run and run after.
		prepared string
	}{
		{name: "insert key", stmts: []string{`INSERT INTO idempotency_keys (tenant, scope, key, operation, fingerprint, state, expires_at, created_at)
			VALUES ('alice', '', 'x', 'op', x'00', 'completed', 1, 1)`}},
		{name: "update key", stmts: []string{`UPDATE main.Idempotency_Keys SET status = 500`}},
		{name: "delete phase", stmts: []string{`DELETE FROM idempotency_phases`}},
		{name: "update phase", stmts: []string{`UPDATE idempotency_phases SET result = x'00'`}},
		{name: "insert phase", stmts: []string{`INSERT INTO idempotency_phases VALUES ('alice', '', 'a1', 'p2', x'00', 1, 1)`}},
		{name: "update outbox", stmts: []string{`UPDATE idempotency_outbox SET payload = x'00'`}},
		{name: "delete outbox", stmts: []string{`DELETE FROM idempotency_outbox`}},
		{name: "insert outbox", stmts: []string{`INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload, next_attempt_at, created_at)
			VALUES ('alice', '', 'a1', 'e2', 'n', x'00', 1, 1)`}},
		{name: "trigger", stmts: []string{
			`CREATE TRIGGER t AFTER INSERT ON mine BEGIN DELETE FROM idempotency_keys; END`,
			`INSERT INTO mine VALUES (1)`}},
		{name: "temporary trigger", stmts: []string{
			`CREATE TEMP TRIGGER t AFTER INSERT ON mine BEGIN UPDATE idempotency_outbox SET payload = x'00'; END`,
			`INSERT INTO mine VALUES (1)`}},
		{name: "view", stmts: []string{
			`CREATE VIEW v AS SELECT x FROM mine`,
			`CREATE TRIGGER t INSTEAD OF INSERT ON v BEGIN DELETE FROM idempotency_phases; END`,
			`INSERT INTO v VALUES (1)`}},
		{name: "prepared before the trigger", prepared: `INSERT INTO mine VALUES (2)`, stmts: []string{
			`CREATE TRIGGER t AFTER INSERT ON mine BEGIN UPDATE idempotency_keys SET status = 500; END`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t)
			migrateAll(t, s)
			for _, q := range []string{
				`CREATE TABLE mine (x INTEGER)`,
				`INSERT INTO idempotency_keys (tenant, scope, key, operation, fingerprint, state, expires_at, created_at, status)
				 VALUES ('alice', '', 'a1', 'op', x'00', 'completed', 1, 1, 201)`,
				`INSERT INTO idempotency_phases VALUES ('alice', '', 'a1', 'p', x'01', 1, 1)`,
				`INSERT INTO idempotency_outbox (tenant, scope, key, effect_key, name, payload, next_attempt_at, created_at)
				 VALUES ('alice', '', 'a1', 'e', 'n', x'01', 1, 1)`,
			} {
				if _, err := s.DB().ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			before := storeRows(t, s)
			it, tx := beginWithEffects(t, s, time.Minute)
			if c.prepared != "" {
				st, err := tx.PrepareContext(ctx, c.prepared)
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range c.stmts {
					if _, err := tx.ExecContext(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				_, err = st.ExecContext(ctx)
				t.Logf("the prepared statement: %v", err)
			} else {
				for _, q := range c.stmts {
					_, err := tx.ExecContext(ctx, q)
					t.Logf("%s: %v", q, err)
				}
			}
			if err := it.Commit(ctx, idemstore.Response{}); err != nil {
				t.Logf("commit: %v", err)
			}
			if after := storeRows(t, s); after != before {
				t.Errorf("the store's tables after a handler's %s:\n%s\nwant them unchanged:\n%s", c.name, after, before)
			}
		})
	}
}

// migrateAll applies the phases' and the outbox's migrations to s.
func migrateAll(t *testing.T, s *sqlitestore.Store) {
	t.Helper()
	for _, schema := range []func(string) (string, string, error){templates.PhaseSchema, templates.OutboxSchema} {
		up, _, err := schema("sqlite")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().ExecContext(context.Background(), up); err != nil {
			t.Fatal(err)
		}
	}
}

// storeRows is what the store's tables hold, as text.
func storeRows(t *testing.T, s *sqlitestore.Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT quote(tenant)||quote(scope)||quote(key)||quote(state)||quote(status)||quote(body) FROM idempotency_keys ORDER BY tenant, scope, key`,
		`SELECT quote(tenant)||quote(scope)||quote(key)||quote(name)||quote(result) FROM idempotency_phases ORDER BY tenant, scope, key, name`,
		`SELECT quote(id)||quote(tenant)||quote(key)||quote(effect_key)||quote(payload)||quote(state) FROM idempotency_outbox ORDER BY id`,
	} {
		rows, err := s.DB().QueryContext(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var row string
			if err := rows.Scan(&row); err != nil {
				t.Fatal(err)
			}
			b.WriteString(row + "\n")
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A trigger a handler makes on a table of its own outlives its request,
// and fires in the application's own writes outside any request too, on
// connections without the authorizer: there it would write the store's
// tables unchecked. A handler's transaction that made a trigger which
// writes them, however indirectly, is not committed, and its key fails
// closed (docs/semantics.md §7.2); one whose triggers write only the
// application's tables is.
func TestAttackTriggerThatWritesTheStoresTablesIsNotCommitted(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		stmts   string
		commits bool
	}{
		{name: "after insert", stmts: `CREATE TRIGGER steal AFTER INSERT ON effects
			BEGIN UPDATE idempotency_keys SET body = CAST('pay mallory' AS BLOB) WHERE tenant = 'alice'; END`},
		{name: "update of a column", stmts: `CREATE TABLE mine (x INTEGER, y INTEGER GENERATED ALWAYS AS (x + 1), z INTEGER);
			CREATE TRIGGER steal BEFORE UPDATE OF z ON mine
			BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`},
		{name: "delete", stmts: `CREATE TRIGGER steal AFTER DELETE ON effects
			BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`},
		{name: "view", stmts: `CREATE VIEW v AS SELECT marker FROM effects;
			CREATE TRIGGER steal INSTEAD OF UPDATE ON v
			BEGIN UPDATE idempotency_keys SET body = CAST('pay mallory' AS BLOB) WHERE tenant = 'alice'; END`},
		{name: "through another table", stmts: `CREATE TABLE relay (x TEXT);
			CREATE TRIGGER steal AFTER INSERT ON relay
			BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END;
			CREATE TRIGGER pass AFTER INSERT ON effects BEGIN INSERT INTO relay VALUES (new.marker); END`},
		{name: "beside one that cannot be prepared", stmts: `CREATE TRIGGER broken AFTER INSERT ON effects
			BEGIN INSERT INTO missing VALUES (1); END;
			CREATE TRIGGER steal AFTER INSERT ON effects
			BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`},
		{name: "own tables", commits: true, stmts: `CREATE TABLE audit (marker TEXT);
			CREATE TRIGGER keep AFTER INSERT ON effects BEGIN INSERT INTO audit VALUES (new.marker); END;
			CREATE VIEW v AS SELECT marker FROM effects;
			CREATE TRIGGER keep_v INSTEAD OF DELETE ON v BEGIN DELETE FROM effects WHERE marker = old.marker; END`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openStore(t)
			migrateAll(t, s)
			h := tenantEngine(t, s)
			if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
				t.Fatalf("alice's request = %d %q", w.Code, w.Body)
			}
			w := postAs(h, "mallory", "m1", c.stmts)
			if committed := w.Code == http.StatusCreated; committed != c.commits {
				t.Errorf("mallory's request = %d %q, committed %v, want %v", w.Code, w.Body, committed, c.commits)
			}
			if !c.commits {
				var state string
				if err := s.DB().QueryRowContext(ctx, `SELECT state FROM idempotency_keys WHERE tenant = 'mallory'`).Scan(&state); err != nil || state != "indeterminate" {
					t.Errorf("mallory's key = %q, %v; want it failed closed", state, err)
				}
			}
			before := storeRows(t, s)
			// The application's own writes, outside any request.
			for _, q := range []string{
				`INSERT INTO effects (marker) VALUES ('app')`,
				`UPDATE effects SET marker = marker`,
				`DELETE FROM effects WHERE marker = 'app'`,
			} {
				if _, err := s.DB().ExecContext(ctx, q); err != nil {
					t.Logf("%s: %v", q, err)
				}
			}
			for _, q := range []string{`INSERT INTO mine (x) VALUES (1)`, `UPDATE mine SET z = 1`, `UPDATE v SET marker = marker`} {
				_, _ = s.DB().ExecContext(ctx, q)
			}
			if after := storeRows(t, s); after != before {
				t.Errorf("the store's tables after the application's writes:\n%s\nwant them as they were:\n%s", after, before)
			}
		})
	}
}

// StageEffect's insert is the one write of the store's tables the
// authorizer lets through while the handler owns its transaction, and it
// lets through nothing else meanwhile: goroutines of the handler's that
// write the outbox's table while it stages, on the same transaction,
// are refused every time.
func TestStageEffectLetsNoWriteOfTheHandlersThrough(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	migrateAll(t, s)
	id := idemstore.Identity{Tenant: "acme", Scope: "createOrder", Key: "k1"}
	_, it, err := s.ClaimTx(ctx, idemstore.Claim{
		Identity: id, Operation: "createOrder", Fingerprint: []byte{1}, Token: "k1",
		Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover,
	})
	if err != nil {
		t.Fatal(err)
	}
	tx := it.Driver().(*sqlitestore.Tx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var through atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tx.ExecContext(ctx, `UPDATE idempotency_outbox SET payload = x'00'`); err == nil {
					through.Add(1)
				}
			}
		})
	}
	for i := range 300 {
		if ok, err := sqlitestore.StageEffect(ctx, tx, id, fmt.Sprint("e", i), "receipt", []byte("staged"), time.Now()); !ok || err != nil {
			t.Fatalf("StageEffect %d = %v, %v", i, ok, err)
		}
	}
	close(stop)
	wg.Wait()
	if err := it.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	var changed int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM idempotency_outbox WHERE payload <> CAST('staged' AS BLOB)`).Scan(&changed); err != nil {
		t.Fatal(err)
	}
	if n := through.Load(); n > 0 || changed > 0 {
		t.Errorf("%d of the handler's updates of the outbox got through while it staged, %d effects changed", n, changed)
	}
}
