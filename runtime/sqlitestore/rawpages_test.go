package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// sqlite_dbpage is the database file's raw pages as a virtual table: a
// statement that writes it can commit what the store's authorizer refuses
// a handler, such as a trigger on idempotency_keys created on a table of
// another spelling and patched in place, which would then act on every
// tenant's completions. A handler's transaction may not touch it, and a
// database opened with DSN cannot write it from any connection (SQLite's
// defensive mode).
func TestRawPagesAreOutOfReach(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	tx, err := s.Begin(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := tx.Driver().(*sqlitestore.Tx)
	for _, q := range []string{
		`SELECT pgno, data FROM sqlite_dbpage`,
		`UPDATE sqlite_dbpage SET data = data WHERE pgno = 1`,
		`SELECT count(*) FROM dbstat`,
	} {
		if _, err := h.ExecContext(ctx, q); err == nil {
			t.Errorf("a handler ran %s", q)
		}
	}
	if err := tx.Commit(ctx, idemstore.Response{}); err != nil {
		t.Logf("Commit after refused statements: %v", err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE sqlite_dbpage SET data = data WHERE pgno = 1`); err == nil {
		t.Error("a connection of a database opened with DSN wrote its raw pages")
	}
}
