package sqlitestore_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// reportingEngine runs, in mallory's requests, the statement of her
// X-Attack header, and answers 500 when it fails; everyone else's handler
// runs alice's, a temporary table of its own for its work.
func reportingEngine(t *testing.T, s *sqlitestore.Store) http.Handler {
	t.Helper()
	tenant := func(r *http.Request) (string, bool) { return r.Header.Get("X-Tenant"), true }
	return attackEngineTenant(t, s, 30*time.Second, tenant, idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *sqlitestore.Tx) {
		q := `CREATE TEMP TABLE scratch (x INTEGER); INSERT INTO scratch VALUES (1); INSERT INTO effects (marker) SELECT 'alice' FROM scratch`
		if r.Header.Get("X-Tenant") == "mallory" {
			q = r.Header.Get("X-Attack")
		}
		if _, err := tx.ExecContext(r.Context(), q); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
}

// A handler may make no object, of main's or a temporary one, named as
// SQLite names its own (docs/semantics.md §7.2): SQLite looks a name up
// among the tables and views before the pragmas' table-valued functions,
// so a view pragma_database_list would answer for the pragma in the
// store's own statements (the database file the owner lock is taken on)
// and in Commit's checks (pragma_foreign_key_list, pragma_table_xinfo).
// SQLite folds ASCII case, and so does the refusal.
func TestAHandlerMakesNoObjectNamedAsSQLitesOwn(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	h := reportingEngine(t, s)
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE own (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{
		`CREATE VIEW pragma_database_list AS SELECT '' AS file, 'main' AS name`,
		`CREATE VIEW main.Pragma_Foreign_Key_List AS SELECT 1 AS x`,
		`CREATE TABLE PRAGMA_TABLE_XINFO (x INTEGER)`,
		`CREATE TABLE pragma_table_list AS SELECT 1 AS x`,
		`CREATE TEMP VIEW pragma_foreign_key_list AS SELECT 1 AS x`,
		`CREATE TEMP TABLE pragma_table_xinfo (x INTEGER)`,
		`CREATE VIRTUAL TABLE pragma_x USING fts5(a)`,
		`CREATE VIRTUAL TABLE temp.sqlite_x USING fts5(a)`,
		`CREATE INDEX pragma_i ON own (x)`,
		`CREATE INDEX temp.sqlite_i ON own (x)`,
		`CREATE TRIGGER pragma_t AFTER INSERT ON own BEGIN SELECT 1; END`,
		`CREATE TEMP TRIGGER "sqlite_t" AFTER INSERT ON own BEGIN SELECT 1; END`,
	} {
		w := postAs(h, "mallory", "m"+string(rune('a'+i)), q)
		if w.Code == http.StatusCreated {
			t.Errorf("%s = %d; want it refused", q, w.Code)
		}
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM main.sqlite_schema WHERE lower(name) GLOB 'pragma_*'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d objects named pragma_… were committed", n)
	}
	// A name that only looks like one is the handler's to take, and so
	// are the objects SQLite names sqlite_… itself, in a handler's
	// statement that makes a table or analyzes.
	for i, q := range []string{
		`CREATE VIEW pragmas AS SELECT 1 AS x`,
		`CREATE TABLE u (x UNIQUE)`,
		`CREATE TABLE w (k INTEGER PRIMARY KEY, v TEXT) WITHOUT ROWID`,
		`CREATE TABLE ai (id INTEGER PRIMARY KEY AUTOINCREMENT)`,
		`CREATE TEMP TABLE tu (x UNIQUE)`,
		`ANALYZE`,
	} {
		if w := postAs(h, "mallory", "n"+string(rune('a'+i)), q); w.Code != http.StatusCreated {
			t.Errorf("%s = %d %q; want 201", q, w.Code, w.Body)
		}
	}
}

// Commit's checks read the schema through the pragmas' table-valued
// functions. A view of main's named as one, made before handlers were
// refused such names, is no part of what they read: another tenant's
// handler that makes a temporary table for its own work commits, and its
// key completes (docs/semantics.md §7.2: a handler may not affect another
// request's key).
func TestAViewNamedAsACheckPragmaFailsNoOtherKey(t *testing.T) {
	for _, view := range []string{"pragma_foreign_key_list", "pragma_table_xinfo", "pragma_table_list"} {
		t.Run(view, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t)
			h := reportingEngine(t, s)
			if _, err := s.DB().ExecContext(ctx, `CREATE VIEW `+view+` AS SELECT 1 AS x`); err != nil {
				t.Fatal(err)
			}
			w := postAs(h, "alice", "a1", "")
			if w.Code != http.StatusCreated {
				t.Errorf("alice's request, whose handler makes a temporary table = %d %q; want 201", w.Code, w.Body)
			}
			var state string
			_ = s.DB().QueryRowContext(ctx, `SELECT state FROM idempotency_keys WHERE tenant = 'alice'`).Scan(&state)
			if state != "completed" {
				t.Errorf("alice's key is %q, want completed", state)
			}
		})
	}
}
