//go:build linux

package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// The owner lock is on the database file, so that every name of the file
// reaches it (docs/semantics.md §7.4), but SQLite names a database's WAL
// and its shared-memory index after the name it was opened by. A process
// that reaches the file by a hard link, in another directory or under
// another name in the same one, writes and reads a WAL of its own: the claims another process holds are not there
// for it, so the same request's retry would win its key while the first
// run still holds it, and the handler would run twice. A store refuses a
// file with more than one link, by either name, recovering or not.
func TestASecondNameOfTheDatabaseDoesNotWinAHeldKey(t *testing.T) {
	path := newOwnerDB(t)
	ownerChild(t, "claim-plain", path)
	other := filepath.Join(t.TempDir(), "idem.db")
	if err := os.Link(path, other); err != nil {
		t.Skipf("no hard link: %v", err)
	}
	for _, name := range []string{other, path} {
		for _, opts := range [][]sqlitestore.Option{nil, {sqlitestore.WithDeadHolderRecovery()}} {
			s, err := sqlitestore.Open(context.Background(), name, opts...)
			if err == nil {
				claimsStandInFlight(t, s, "a store of another process opened through "+name)
				_ = s.Close()
			}
			if !errors.Is(err, sqlitestore.ErrHardLinked) {
				t.Errorf("Open(%s, %d options) of a file with two names = %v; want ErrHardLinked", name, len(opts), err)
			}
		}
	}
}
