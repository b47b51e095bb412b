//go:build !linux

package sqlitestore

import (
	"context"
	"os"
	"reflect"
)

// ownerLock is absent off Linux. The owner lock is a flock on the database
// file itself, which SQLite locks with fcntl: Linux documents the two kinds
// of lock as independent (flock(2)); the BSDs and macOS do not, and there a
// shared flock could refuse SQLite's own write locks. No store holds a lock here,
// so none can learn that the others are gone, and a dead process's claims
// stay in flight until their leases run out.
type ownerLock struct{}

// lockOwner takes no lock on this platform.
func lockOwner(context.Context, string, bool) (*ownerLock, bool, error) { return nil, false, nil }

func (*ownerLock) share(context.Context) error { return nil }

func (*ownerLock) release() error { return nil }

// openElsewhere reports nothing on this platform, where the store does
// not read SQLite's locks: a file renamed under a live process is not
// told apart (docs/semantics.md §7.4).
func openElsewhere(string) (bool, error) { return false, nil }

// fileLinks reports how many hard links the file at path has, where the
// platform's file information has a link count (Nlink, as on the BSDs
// and macOS); known is false where it has none (Windows).
func fileLinks(path string) (links uint64, known bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false, err
	}
	v := reflect.Indirect(reflect.ValueOf(fi.Sys()))
	if v.Kind() != reflect.Struct {
		return 0, false, nil
	}
	switch f := v.FieldByName("Nlink"); f.Kind() {
	case reflect.Uint, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return f.Uint(), true, nil
	}
	return 0, false, nil
}
