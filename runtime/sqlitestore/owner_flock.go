//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ownerWait bounds how long a store waits for its share of the owner lock
// while another store that starts holds it exclusively: that store only
// ends leases, one UPDATE that waits at most SQLite's busy timeout.
const ownerWait = 30 * time.Second

// ownerPoll is how often a waiting store asks for its share again. The
// wait is polled rather than blocked in flock, so that ctx can end it.
const ownerPoll = 5 * time.Millisecond

// ownerLock is a store's hold on the owner lock file (see owner.go).
type ownerLock struct {
	f *os.File
}

// lockOwner opens the lock file at path, creating it, and takes it shared,
// waiting while a starting store holds it exclusively. With exclusive it
// first tries to take it exclusively, and reports whether that was granted
// (alone): no other store holds it.
func lockOwner(ctx context.Context, path string, exclusive bool) (l *ownerLock, alone bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	l = &ownerLock{f: f}
	granted := false
	if exclusive {
		granted, err = l.try(syscall.LOCK_EX)
	}
	if err == nil && !granted {
		err = l.share(ctx)
	}
	if err != nil {
		_ = f.Close()
		return nil, false, err
	}
	return l, granted, nil
}

// share takes the lock shared: a store that holds it exclusively turns it
// into a shared lock, and a store that holds nothing waits for it.
func (l *ownerLock) share(ctx context.Context) error {
	give := time.Now().Add(ownerWait)
	for {
		granted, err := l.try(syscall.LOCK_SH)
		if err != nil || granted {
			return err
		}
		if time.Now().After(give) {
			return fmt.Errorf("%s held exclusively for %v", l.f.Name(), ownerWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(ownerPoll):
		}
	}
}

// try asks for the lock in how (LOCK_EX or LOCK_SH) without waiting, and
// reports whether it was granted.
func (l *ownerLock) try(how int) (bool, error) {
	for {
		err := syscall.Flock(int(l.f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, fmt.Errorf("flock %s: %w", l.f.Name(), err)
	}
}

// release gives the lock up by closing its file, which ends the flock.
func (l *ownerLock) release() error {
	return l.f.Close()
}
