//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sqlitestore

import "context"

// ownerLock is absent where the platform has no flock: no store holds a
// lock, so none can learn that the others are gone, and a dead process's
// claims stay in flight until their leases run out.
type ownerLock struct{}

// lockOwner takes no lock on this platform.
func lockOwner(context.Context, string, bool) (*ownerLock, bool, error) { return nil, false, nil }

func (*ownerLock) share(context.Context) error { return nil }

func (*ownerLock) release() error { return nil }
