package sqliteoutbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/outboxtest"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// helperEnv names the database of a child process (TestHelperProcess).
const helperEnv = "SQLITEOUTBOX_HELPER_DB"

// target is the outbox in a database file of its own per test.
var target = outboxtest.Target{NewDB: newDB, Open: open, Migrate: migrate, HelperEnv: helperEnv}

// newDB creates a database file with sqlitestore's tables, the outbox's,
// and a table of business writes.
func newDB(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := sqliteoutbox.Migrate(context.Background(), s.DB()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DB().Exec(`CREATE TABLE orders (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string, maxPayload int) outboxtest.Instance {
	s, err := sqlitestore.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	db := s.DB()
	return outboxtest.Instance{
		Store:  s,
		Outbox: sqliteoutbox.New(s, idemoutbox.Options{MaxPayload: maxPayload}),
		Write: func(ctx context.Context, marker string) error {
			tx, err := idem.TxFor[*sqlitestore.Tx](ctx, "createOrder")
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO orders (marker) VALUES (?)`, marker)
			return err
		},
		Count: func(ctx context.Context, marker string) (int, error) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE marker = ?`, marker).Scan(&n)
			return n, err
		},
		Block: func(ctx context.Context) (func(), error) {
			// A request's transaction, which holds the process's write
			// turn and SQLite's write lock.
			_, tx, err := s.ClaimTx(ctx, idemstore.Claim{
				Identity:  idemstore.Identity{Tenant: "acme", Scope: "block", Key: "block"},
				Operation: "block", Fingerprint: []byte{1}, Token: "block",
				Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.Takeover,
			})
			if err != nil {
				return nil, err
			}
			return func() { _ = tx.Rollback(context.Background()) }, nil
		},
	}
}

// migrate applies the outbox's migration to the database at path, up or
// down, on a database/sql handle of its own beside the instance's store.
func migrate(t *testing.T, path string, up bool) {
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = sqliteoutbox.Migrate(context.Background(), db)
	if !up {
		_, down := sqliteoutbox.Schema()
		_, err = db.ExecContext(context.Background(), down)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutbox(t *testing.T) { outboxtest.Run(t, target) }

func TestKills(t *testing.T) { outboxtest.RunKills(t, target) }

// TestHelperProcess is the child of the kill tests.
func TestHelperProcess(t *testing.T) { outboxtest.Child(t, target) }

// A runner's write waits for the process's write turn for as long as a
// request's transaction holds it, past SQLite's busy timeout (5 s), and
// then succeeds: it queues behind the requests' writes instead of
// polling SQLite's lock against them until the timeout fails it.
func TestWritesWaitForTheTurn(t *testing.T) {
	inst := open(t, newDB(t), 0)
	release, err := inst.Block(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const held = 6 * time.Second
	time.AfterFunc(held, release)
	start := time.Now()
	if _, err := inst.Outbox.Claim(context.Background(), 1, time.Minute, "runner"); err != nil {
		t.Fatalf("a claim behind a request's transaction of %v failed after %v: %v", held, time.Since(start), err)
	}
	if d := time.Since(start); d < held {
		t.Errorf("the claim returned %v after it began, while the request's transaction held the turn for %v", d, held)
	}
}
