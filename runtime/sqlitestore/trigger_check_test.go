package sqlitestore_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// hiddenTrigger makes a trigger, steal, on a view, orders, whose first
// step inserts into another view, v2, that has no trigger, and whose
// second deletes alice's keys.
const hiddenTrigger = `CREATE VIEW v2 AS SELECT 1 AS x;
	CREATE VIEW orders AS SELECT marker FROM effects;
	CREATE TRIGGER steal INSTEAD OF INSERT ON orders
	BEGIN INSERT INTO v2 VALUES (1); DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`

// appWriteKeepsStore runs q, the application's own write outside any
// request, and checks that the store's tables are as they were: no
// trigger a handler's transaction committed wrote them.
func appWriteKeepsStore(t *testing.T, s *sqlitestore.Store, q string) {
	t.Helper()
	before := storeRows(t, s)
	if _, err := s.DB().ExecContext(context.Background(), q); err != nil {
		t.Logf("the application's write: %v", err)
	}
	if after := storeRows(t, s); after != before {
		t.Errorf("the store's tables after the application's %s:\n%s\nwant them as they were:\n%s", q, after, before)
	}
}

// Commit's check of the triggers (docs/semantics.md §7.2) prepares an
// INSERT, an UPDATE and a DELETE of each view with triggers, and a view's
// statement may fail to prepare "because it is a view" only when the
// view has no trigger for it. SQLite stops coding a trigger's steps at
// the first that fails: an INSTEAD OF INSERT trigger whose first step
// inserts into another view, v2, with no trigger of its own, hides its
// second step, a DELETE of the keys' table, behind v2's error. Mallory's
// transaction that makes it is not committed; had it been, her next
// request would turn v2 into a table, and the application's own writes
// through the view, outside any request, would delete alice's completed
// key for her retry to run her handler again.
func TestATriggerHiddenBehindAViewsErrorIsRefused(t *testing.T) {
	s := openStore(t)
	migrateAll(t, s)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's request = %d %q", w.Code, w.Body)
	}
	w := postAs(h, "mallory", "m1", hiddenTrigger)
	if w.Code == http.StatusCreated {
		t.Errorf("mallory's request, which made a trigger whose write of the keys' table hides behind a view's error = %d %q; want it not committed", w.Code, w.Body)
	}
	w = postAs(h, "mallory", "m2", `DROP VIEW v2; CREATE TABLE v2 (x INTEGER)`)
	t.Logf("mallory's second request = %d %q", w.Code, w.Body)
	appWriteKeepsStore(t, s, `INSERT INTO orders (marker) VALUES ('app')`)
	postAs(h, "alice", "a1", "")
	if n := countMarker(t, s, "alice/a1"); n != 1 {
		t.Errorf("alice's key a1 ran %d times: a trigger a handler committed deleted her key", n)
	}
}

// Replacing a view by a table changes what a trigger already there
// writes, with no new trigger for Commit to check: a handler's
// transaction that makes or drops a table or a view has the triggers
// checked as one that makes a trigger does. A trigger hidden behind a
// view's error, made before the check saw through it, is found once a
// handler turns the view into a table, and that transaction is not
// committed.
func TestATableMadeInAViewsPlaceHasTheTriggersChecked(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	migrateAll(t, s)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's request = %d %q", w.Code, w.Body)
	}
	if _, err := s.DB().ExecContext(ctx, hiddenTrigger); err != nil {
		t.Fatal(err)
	}
	w := postAs(h, "mallory", "m1", `DROP VIEW v2; CREATE TABLE v2 (x INTEGER)`)
	if w.Code == http.StatusCreated {
		t.Errorf("mallory's request, which turned v2 into a table = %d %q; want it not committed", w.Code, w.Body)
	}
	appWriteKeepsStore(t, s, `INSERT INTO orders (marker) VALUES ('app')`)
}

// A view's statement for which the view has no trigger fails to prepare
// for the view's sake, and the check lets it: a view with an INSTEAD OF
// INSERT trigger only, whose steps write the handler's own table, is
// committed, its name and its trigger's spelt as SQLite lets them be.
func TestAViewWithATriggerForOneStatementIsCommitted(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	w := postAs(h, "mallory", "m1", `CREATE TABLE log (m TEXT);
		CREATE VIEW "my view" AS SELECT marker FROM effects;
		CREATE TRIGGER /* INSTEAD OF DELETE */ "instead of update" INSTEAD OF INSERT ON "my view"
		BEGIN INSERT INTO log VALUES (new.marker); END`)
	if w.Code != http.StatusCreated {
		t.Errorf("a view with an INSTEAD OF INSERT trigger = %d %q; want 201", w.Code, w.Body)
	}
	var n int
	if err := s.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM sqlite_schema WHERE name = 'instead of update'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the trigger was not committed: %d, %v", n, err)
	}
}

// Commit's check prepares an UPDATE of every column of each table with
// triggers, but SQLite fires an UPDATE OF trigger by the names a SET
// clause gives, and the rowid's names (rowid, oid, _rowid_) are no column
// pragma_table_xinfo lists: the check's UPDATE sets the rowid by each
// name too, and a trigger AFTER UPDATE OF any of them that writes the
// store's tables is refused, so that the application's own UPDATE that
// sets the rowid, outside any request, cannot run it.
func TestAnUpdateOfRowidTriggerIsChecked(t *testing.T) {
	for _, name := range []string{"rowid", "OID", "_rowid_"} {
		t.Run(name, func(t *testing.T) {
			s := openStore(t)
			migrateAll(t, s)
			h := tenantEngine(t, s)
			if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
				t.Fatalf("alice's request = %d %q", w.Code, w.Body)
			}
			w := postAs(h, "mallory", "m1", `CREATE TRIGGER steal AFTER UPDATE OF `+name+` ON effects
				BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`)
			if w.Code == http.StatusCreated {
				t.Errorf("mallory's request, which made a trigger that deletes alice's keys = %d %q; want it not committed", w.Code, w.Body)
			}
			appWriteKeepsStore(t, s, `UPDATE effects SET `+name+` = `+name)
		})
	}
}

// A table without a rowid, or whose column takes one of the rowid's
// names, has its triggers checked all the same, and committed when they
// write the handler's own tables.
func TestTriggersOfTablesWithoutARowidAreCommitted(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	w := postAs(h, "mallory", "m1", `CREATE TABLE log (m TEXT);
		CREATE TABLE w (k INTEGER PRIMARY KEY, v TEXT) WITHOUT ROWID;
		CREATE TRIGGER wt AFTER UPDATE ON w BEGIN INSERT INTO log VALUES (new.v); END;
		CREATE TABLE o (OID TEXT, v TEXT);
		CREATE TRIGGER ot AFTER UPDATE OF oid ON o BEGIN INSERT INTO log VALUES (new.v); END`)
	if w.Code != http.StatusCreated {
		t.Errorf("triggers on a WITHOUT ROWID table and one with a column oid = %d %q; want 201", w.Code, w.Body)
	}
	var names []string
	rows, err := s.DB().QueryContext(context.Background(), `SELECT name FROM sqlite_schema WHERE type = 'trigger' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if got := strings.Join(names, ","); got != "ot,wt" {
		t.Errorf("triggers committed: %q, want ot,wt", got)
	}
}
