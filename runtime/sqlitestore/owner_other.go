//go:build !linux

package sqlitestore

import "context"

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
