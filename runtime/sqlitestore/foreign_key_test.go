package sqlitestore_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// The store's own statements run on connections without the authorizer,
// and a foreign key runs code of the handler's inside them: one of a table
// of the handler's that references idempotency_keys' primary key, ON
// DELETE CASCADE, deletes from that table whenever the store deletes the
// key (the sweeper, a release, an operator's forget), and a trigger the
// handler made on that table runs there, unchecked. A handler's
// transaction that made such a table is not committed, and its key fails
// closed (docs/semantics.md §7.2): here mallory's trigger would delete
// alice's live key when the sweeper deletes mallory's expired one, and
// alice's retry would run her handler a second time.
func TestAttackForeignKeyCascadeToTheStoresTableIsNotCommitted(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := openStore(t, sqlitestore.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	h := tenantEngine(t, s)
	if w := postAs(h, "mallory", "m1", `
		CREATE TABLE pin (tenant TEXT, scope TEXT, key TEXT,
			FOREIGN KEY (tenant, scope, key) REFERENCES idempotency_keys (tenant, scope, key) ON DELETE CASCADE);
		CREATE TRIGGER pin_gone AFTER DELETE ON pin
		BEGIN DELETE FROM idempotency_keys WHERE tenant = 'alice'; END;
		INSERT INTO pin SELECT tenant, scope, key FROM main.idempotency_keys WHERE tenant = 'mallory'`); w.Code == http.StatusCreated {
		t.Errorf("mallory's request, whose table references the store's = %d %q, want it not committed", w.Code, w.Body)
	}
	var state string
	if err := s.DB().QueryRow(`SELECT state FROM idempotency_keys WHERE tenant = 'mallory'`).Scan(&state); err != nil || state != "indeterminate" {
		t.Errorf("mallory's key = %q, %v; want it failed closed", state, err)
	}
	clock.Add(int64(2 * time.Hour))
	if w := postAs(h, "alice", "a1", ""); w.Code != http.StatusCreated {
		t.Fatalf("alice's request = %d %q", w.Code, w.Body)
	}
	n, err := s.Sweep(context.Background(), 100)
	t.Logf("sweep: %d rows, %v", n, err)
	again := postAs(h, "alice", "a1", "")
	if runs := countMarker(t, s, "alice/a1"); runs != 1 {
		t.Errorf("alice's live key a1 ran %d times (retry = %d %q, replayed %q): the sweep of mallory's expired key ran mallory's trigger, which deleted it",
			runs, again.Code, again.Body, again.Header().Get("Idempotent-Replayed"))
	}
}

// A foreign key without an action pins what it references: had the table
// of a handler's that references the store's committed, every delete of
// the store's of a row it references would fail (FOREIGN KEY constraint
// failed), the sweeper's batch whichever expired rows it holds, so that no
// expired row of any tenant's is deleted again (docs/semantics.md §4), and
// a release of a pinned key (docs/semantics.md §7.3). Such a table is not committed, however
// the foreign key is written, whichever of the store's tables it
// references, in main or among the temporary tables, in a keyed or a
// keyless transaction; a table that references none of them is.
func TestAttackForeignKeyToTheStoresTableIsNotCommitted(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, stmts string
		keyless     bool
		commits     bool
	}{
		{name: "table constraint", stmts: `CREATE TABLE pin (tenant TEXT, scope TEXT, key TEXT,
			FOREIGN KEY (tenant, scope, key) REFERENCES idempotency_keys (tenant, scope, key));
			INSERT INTO pin SELECT tenant, scope, key FROM main.idempotency_keys WHERE key = 'a2'`},
		{name: "column constraint", stmts: `CREATE TABLE pin (k INTEGER REFERENCES "IDEMPOTENCY_KEYS" (rowid));
			INSERT INTO pin SELECT rowid FROM main.idempotency_keys WHERE key = 'a2'`},
		{name: "phases", stmts: `CREATE TABLE pin (k TEXT REFERENCES idempotency_phases)`},
		{name: "outbox before its migration", stmts: `CREATE TABLE pin (k INTEGER REFERENCES idempotency_outbox (id))`},
		{name: "temporary", stmts: `CREATE TEMP TABLE pin (k TEXT REFERENCES idempotency_keys)`},
		{name: "keyless", keyless: true, stmts: `CREATE TABLE pin (tenant TEXT, scope TEXT, key TEXT,
			FOREIGN KEY (tenant, scope, key) REFERENCES idempotency_keys (tenant, scope, key));
			INSERT INTO pin SELECT tenant, scope, key FROM main.idempotency_keys WHERE key = 'a2'`},
		{name: "own table", commits: true, stmts: `CREATE TABLE parent (k TEXT PRIMARY KEY);
			CREATE TABLE pin (k TEXT REFERENCES parent ON DELETE CASCADE);
			INSERT INTO parent VALUES ('a2'); INSERT INTO pin VALUES ('a2')`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			s := openStore(t, sqlitestore.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
			h := tenantEngine(t, s)
			for _, k := range []string{"a1", "a2", "a3"} {
				if w := postAs(h, "alice", k, ""); w.Code != http.StatusCreated {
					t.Fatalf("alice's request = %d %q", w.Code, w.Body)
				}
			}
			var committed bool
			if c.keyless {
				it, tx := beginWithEffects(t, s, time.Minute)
				_, err := tx.ExecContext(ctx, c.stmts)
				t.Logf("the handler's statements: %v", err)
				err = it.Commit(ctx, idemstore.Response{})
				t.Logf("commit: %v", err)
				committed = err == nil
			} else {
				w := postAs(h, "mallory", "m1", c.stmts)
				committed = w.Code == http.StatusCreated
			}
			if committed != c.commits {
				t.Errorf("the handler's transaction committed = %v, want %v", committed, c.commits)
			}
			if c.commits {
				return
			}
			clock.Add(int64(2 * time.Hour))
			n, err := s.Sweep(ctx, 1000)
			if err != nil || n < 3 {
				t.Errorf("the sweep of the expired rows = %d, %v: a table of a handler's pins the store's rows", n, err)
			}
		})
	}
}
