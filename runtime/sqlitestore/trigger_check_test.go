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

// alicesKeyDone opens a store with every migration, and an engine of
// tenants' requests in which alice's key a1 has completed.
func alicesKeyDone(t *testing.T) (*sqlitestore.Store, http.Handler) {
	t.Helper()
	s := openStore(t)
	migrateAll(t, s)
	h := tenantEngine(t, s)
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's request = %d %q", w.Code, w.Body)
	}
	return s, h
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
	s, h := alicesKeyDone(t)
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
	s, h := alicesKeyDone(t)
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
			s, h := alicesKeyDone(t)
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

// Commit's check of the triggers (docs/semantics.md §7.2) prepares an
// UPDATE of each triggered table that sets every column it has today, and
// each name its UPDATE OF triggers list. SQLite fires an UPDATE OF
// trigger by the names a SET clause gives, and does not check, when the
// trigger is made, that the names of its OF list are columns at all. A
// trigger AFTER UPDATE OF a column the table does not have yet, whose
// step deletes the keys' table, would fire once the application's own
// migration adds the column (a name mallory guessed, or read off the
// service's public schema plans), in the application's writes of it
// outside any request, and delete alice's completed key for her retry to
// run her handler again: the check's UPDATE names the missing column,
// fails to prepare, and mallory's transaction is not committed.
func TestAnUpdateOfTriggerOnAColumnNotThereYetIsRefused(t *testing.T) {
	ctx := context.Background()
	s, h := alicesKeyDone(t)
	w := postAs(h, "mallory", "m1", `CREATE TRIGGER steal AFTER UPDATE OF "note" ON effects
	BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END`)
	if w.Code == http.StatusCreated {
		t.Errorf("mallory's request, which made a trigger UPDATE OF a column not there yet that deletes the keys' table = %d %q; want it not committed", w.Code, w.Body)
	}
	// The application's own migration, and its own write outside requests.
	if _, err := s.DB().ExecContext(ctx, `ALTER TABLE effects ADD COLUMN note TEXT`); err != nil {
		t.Fatal(err)
	}
	appWriteKeepsStore(t, s, `UPDATE effects SET note = 'seen'`)
	postAs(h, "alice", "a1", "")
	if n := countMarker(t, s, "alice/a1"); n != 1 {
		t.Errorf("alice's key a1 ran %d times: a trigger a handler committed deleted her key", n)
	}
}

// An UPDATE OF trigger whose names are all columns, spelt as SQLite lets
// them be, is committed when it writes the handler's own tables.
func TestAnUpdateOfTriggerOnColumnsThereIsCommitted(t *testing.T) {
	s := openStore(t)
	h := tenantEngine(t, s)
	w := postAs(h, "mallory", "m1", `CREATE TABLE log (m TEXT);
		CREATE TABLE o ("a b" TEXT, [c] TEXT, v TEXT);
		CREATE TRIGGER ot AFTER UPDATE OF "a b", [C], 'v', rowid ON o BEGIN INSERT INTO log VALUES (new.v); END`)
	if w.Code != http.StatusCreated {
		t.Errorf("an UPDATE OF trigger on columns of the table = %d %q; want 201", w.Code, w.Body)
	}
}

// mallorysBrokenTrigger has mallory make a trigger in one request, and in
// a second drop what it needs to be coded, then alice make a temporary
// table: Commit's check of the triggers (docs/semantics.md §7.2) runs in
// every transaction that makes a table and fails it when any trigger of
// main's cannot be prepared, so the drop runs the check too, and it is
// mallory's second transaction that is not committed, not alice's, nor
// any other tenant's later.
func mallorysBrokenTrigger(t *testing.T, made, drop string) {
	t.Helper()
	ctx := context.Background()
	s := openStore(t)
	h := reportingEngine(t, s)
	if w := postAs(h, "mallory", "m1", made); w.Code != http.StatusCreated {
		t.Fatalf("mallory's first request = %d %q", w.Code, w.Body)
	}
	if w := postAs(h, "mallory", "m2", drop); w.Code == http.StatusCreated {
		t.Errorf("mallory's second request, %s = %d %q; want it not committed", drop, w.Code, w.Body)
	}
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Errorf("alice's request, whose handler makes a temporary table = %d %q; want 201", w.Code, w.Body)
	}
	var state string
	_ = s.DB().QueryRowContext(ctx, `SELECT state FROM idempotency_keys WHERE tenant = 'alice'`).Scan(&state)
	if state != "completed" {
		t.Errorf("alice's key is %q, want completed", state)
	}
}

// A trigger's step can depend on an index: an UPSERT's ON CONFLICT (a)
// needs a unique index on a. Dropping it runs the check.
func TestADroppedIndexFailsNoOtherTenantsCommit(t *testing.T) {
	mallorysBrokenTrigger(t, `CREATE TABLE t (a INTEGER);
	CREATE UNIQUE INDEX t_a ON t (a);
	CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO t (a) VALUES (new.a + 1) ON CONFLICT (a) DO NOTHING; END`,
		`DROP INDEX t_a`)
}

// A trigger of a table can write a view, through the view's INSTEAD OF
// trigger; without it the table's trigger fails to prepare ("cannot
// modify … because it is a view", of a table's trigger, which the check
// never passes). Dropping the view's trigger runs the check.
func TestADroppedTriggerFailsNoOtherTenantsCommit(t *testing.T) {
	mallorysBrokenTrigger(t, `CREATE TABLE t (a INTEGER); CREATE TABLE u (a INTEGER);
	CREATE VIEW w AS SELECT a FROM u;
	CREATE TRIGGER wt INSTEAD OF INSERT ON w BEGIN INSERT INTO u VALUES (new.a); END;
	CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO w VALUES (new.a); END`,
		`DROP TRIGGER wt`)
}
