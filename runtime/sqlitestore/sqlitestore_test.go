package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/templates"
)

// openStore opens a store on a new database file in the test's temporary
// directory, with the schema applied from the generated migration.
func openStore(t testing.TB, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	up, _, err := templates.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, up); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, target)
}

func TestConformanceTx(t *testing.T) {
	storetest.RunTx(t, target)
}

// sessionStates is what a handler could leave on an SQLite connection.
var sessionStates = []storetest.SessionState{
	sessionState("temp table", `SELECT secret FROM leak`,
		`CREATE TEMP TABLE leak AS SELECT 'tenant-a secret' AS secret`),
	sessionState("temp view", `SELECT secret FROM leak_view`,
		`CREATE TEMP VIEW leak_view AS SELECT 'tenant-a secret' AS secret`),
	sessionState("temp trigger on a main table", `SELECT count(*) FROM temp.sqlite_schema WHERE name = 'leak_trigger'`,
		`CREATE TEMP TRIGGER leak_trigger AFTER INSERT ON main.effects BEGIN UPDATE effects SET marker = 'tenant-a' WHERE rowid = new.rowid; END`),
	sessionState("attached database", `SELECT secret FROM leak.t`,
		`ATTACH ':memory:' AS leak`, `CREATE TABLE leak.t AS SELECT 'tenant-a secret' AS secret`),
	// A later request meets the setting as a write that fails.
	sessionState("query_only", `INSERT INTO effects (marker) VALUES ('probe') RETURNING 'written'`,
		`PRAGMA query_only = 1`),
	sessionState("busy_timeout", `PRAGMA busy_timeout`, `PRAGMA busy_timeout = 1`),
}

// sessionState is a storetest.SessionState that leaves stmts and reads the
// first column of probe's first row.
func sessionState(name, probe string, stmts ...string) storetest.SessionState {
	return storetest.SessionState{
		Name: name,
		Leave: func(ctx context.Context, tx any) error {
			for _, q := range stmts {
				if _, err := tx.(*sqlitestore.Tx).ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		},
		Probe: func(ctx context.Context, tx any) (string, error) {
			var v string
			err := tx.(*sqlitestore.Tx).QueryRowContext(ctx, probe).Scan(&v)
			return v, err
		},
	}
}

// The schema applies twice without harm, and the down migration removes it.
func TestSchemaUpTwiceAndDown(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over an applied schema: %v", err)
	}
	_, down, err := templates.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, down); err != nil {
		t.Fatalf("down: %v", err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE name LIKE 'idempotency_keys%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d schema objects left after down", n)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
}

func TestStoreErrorsAreReported(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	if _, err := s.DB().ExecContext(ctx, `DROP TABLE idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	c := idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "t", Scope: "op", Key: "k"},
		Operation:     "op",
		Fingerprint:   []byte{1},
		Token:         "tok",
		Lease:         1e9,
		TTL:           1e12,
		OnLeaseExpiry: idemstore.Takeover,
	}
	if _, err := s.Claim(ctx, c); err == nil {
		t.Error("Claim without a table succeeded")
	}
	if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 200}); err == nil || errors.Is(err, idemstore.ErrFenced) {
		t.Errorf("Complete without a table = %v, want a store error that is not ErrFenced", err)
	}
}

// A slow transactional handler holds SQLite's write lock far longer than a
// claim's lock wait; the completions of other keys, whose clients already
// have their answers, must wait for it rather than fail and leave their
// keys in flight.
func TestCompletionsOutwaitASlowTransaction(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, sqlitestore.WithLockWait(200*time.Millisecond))
	claim := testClaim
	const keys = 6
	for i := range keys {
		if res, err := s.Claim(ctx, claim(fmt.Sprint(i))); err != nil || !res.Won {
			t.Fatalf("claim %d: won %v, %v", i, res.Won, err)
		}
	}
	res, tx, err := s.ClaimTx(ctx, claim("slow"))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx: won %v, %v", res.Won, err)
	}
	errs := make(chan error, keys)
	for i := range keys {
		go func() {
			c := claim(fmt.Sprint(i))
			errs <- s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201})
		}()
	}
	time.Sleep(1500 * time.Millisecond) // the slow handler, holding the lock
	if err := tx.Commit(ctx, idemstore.Response{Status: 201}); err != nil {
		t.Fatalf("slow Commit: %v", err)
	}
	for range keys {
		if err := <-errs; err != nil {
			t.Errorf("Complete behind a slow transaction: %v", err)
		}
	}
	for i := range keys {
		res, err := s.Claim(ctx, claim(fmt.Sprint(i)))
		if err != nil || res.Won || res.Existing.State != idemstore.StateCompleted {
			t.Errorf("key %d after its completion: %+v, %v; want completed", i, res, err)
		}
	}
}
