package sqlitestore_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/templates"
)

// A store's tables need not all be there: the outbox's and the phases'
// are migrations of their own, applied when a service starts to use them.
// A handler's statement that would make an object of a store table's name
// is refused (docs/semantics.md §7.2), and so is a trigger on one; a table
// of the handler's own, given a trigger and then renamed to the name of a
// store table that is not there yet, is both. The outbox's migration is
// CREATE TABLE IF NOT EXISTS, so it keeps the handler's table, trigger and
// all, and every effect staged afterwards goes through the handler's
// trigger: here it hands a tenant's effect to another tenant. An index of
// the handler's under the name of the outbox's unique index would keep
// the migration from making that index, and with it the rule that one
// request stages an effect key once.
func TestHandlerCannotMakeAStoreTableThatIsNotThereYet(t *testing.T) {
	cases := map[string][]string{
		"renamed into place": {
			`CREATE TABLE planted (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, scope TEXT NOT NULL,
				key TEXT NOT NULL, effect_key TEXT NOT NULL, name TEXT NOT NULL, payload BLOB NOT NULL,
				state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
				next_attempt_at INTEGER NOT NULL, leased_until INTEGER, lease_token TEXT,
				last_error TEXT, created_at INTEGER NOT NULL, delivered_at INTEGER)`,
			`CREATE TRIGGER planted_redirect AFTER INSERT ON planted
				BEGIN UPDATE planted SET tenant = 'mallory' WHERE id = new.id; END`,
			`ALTER TABLE planted RENAME TO idempotency_outbox`,
		},
		"an index under the name of the outbox's": {
			`CREATE TABLE mine (a TEXT)`,
			`CREATE INDEX idempotency_outbox_pending_key_idx ON mine (a)`,
		},
		"created under the name": {
			`CREATE TABLE idempotency_outbox (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, scope TEXT NOT NULL,
				key TEXT NOT NULL, effect_key TEXT NOT NULL, name TEXT NOT NULL, payload BLOB NOT NULL,
				state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
				next_attempt_at INTEGER NOT NULL, leased_until INTEGER, lease_token TEXT,
				last_error TEXT, created_at INTEGER NOT NULL, delivered_at INTEGER,
				redirect TEXT NOT NULL DEFAULT 'mallory')`,
		},
	}
	for name, plant := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t) // the keys' table only: no outbox yet
			outbox := sqliteoutbox.New(s, idemoutbox.Options{})
			var planted []string
			h := attackEngine(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, err := idem.TxFor[*sqlitestore.Tx](r.Context(), "createTransfer")
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				switch r.Header.Get("Idempotency-Key") {
				case "plant":
					for _, q := range plant {
						if _, err := tx.ExecContext(r.Context(), q); err != nil {
							http.Error(w, err.Error(), http.StatusInternalServerError)
							return
						}
						planted = append(planted, q)
					}
				case "order":
					if err := outbox.Stage(r.Context(), "receipt", []byte(`{"to":"ann"}`)); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				}
				w.WriteHeader(http.StatusCreated)
			}))
			if w := postAttack(h, "plant"); w.Code != http.StatusCreated {
				t.Logf("the planting request was refused (%d %s)", w.Code, w.Body.String())
				return
			}
			up, _, err := templates.OutboxSchema("sqlite")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().ExecContext(ctx, up); err != nil {
				t.Fatalf("the outbox's migration after the handler ran: %v", err)
			}
			if w := postAttack(h, "order"); w.Code != http.StatusCreated {
				t.Fatalf("staging after the migration: %d %s", w.Code, w.Body.String())
			}
			ms, err := outbox.List(ctx, idemoutbox.Query{})
			if err != nil {
				t.Fatal(err)
			}
			var sql string
			_ = s.DB().QueryRowContext(ctx, `SELECT sql FROM main.sqlite_schema WHERE name = 'idempotency_outbox'`).Scan(&sql)
			t.Errorf("a handler's transaction made an object under a name of the store's outbox (%d statements ran, none refused); the outbox's migration kept it and the effects it holds are %+v; its table is now %s",
				len(planted), tenants(ms), sql)
		})
	}
}

// tenants lists the tenant of each message.
func tenants(ms []idemoutbox.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Tenant+":"+m.Name)
	}
	return out
}
