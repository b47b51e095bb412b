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

// A rename of the database file while a service runs (a deploy that moves
// the file into place under its new name, an operator tidying up) leaves
// the running process on the old name's WAL and index, where its claims
// are, while a process started on the new name gets a WAL of its own. The
// owner lock is on the inode, which the rename keeps, and the file has one
// link, so neither tells: the new store would win the keys the running
// process holds, and the same request would run twice (docs/semantics.md
// §7.4). A store refuses a file another process has open under another
// name, recovering or not; moving the file's directory moves its WAL and
// index with it, and is not refused.
func TestARenamedDatabaseDoesNotWinAHeldKey(t *testing.T) {
	path := newOwnerDB(t)
	ownerChild(t, "claim-plain", path)
	moved := filepath.Join(filepath.Dir(path), "idem-moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]sqlitestore.Option{nil, {sqlitestore.WithDeadHolderRecovery()}} {
		s, err := sqlitestore.Open(context.Background(), moved, opts...)
		if err == nil {
			claimsStandInFlight(t, s, "a store of another process opened through the file's new name")
			_ = s.Close()
		}
		if !errors.Is(err, sqlitestore.ErrOpenUnderAnotherName) {
			t.Errorf("Open(%s, %d options) of a file another process has open under its old name = %v; want ErrOpenUnderAnotherName", moved, len(opts), err)
		}
	}

	// Back under its name, in a directory of another name.
	if err := os.Rename(moved, path); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(path)), "moved-dir")
	if err := os.Rename(filepath.Dir(path), dir); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.Open(context.Background(), filepath.Join(dir, filepath.Base(path)))
	if err != nil {
		t.Fatalf("Open of the file in its moved directory = %v; want the WAL and index that moved with it shared", err)
	}
	defer func() { _ = s.Close() }()
	claimsStandInFlight(t, s, "a store of another process opened in the file's moved directory")
}
