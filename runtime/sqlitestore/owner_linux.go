package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ownerWait bounds how long a store waits for its share of the owner lock
// while another store that starts holds it exclusively: that store only
// ends leases, one UPDATE that waits at most SQLite's busy timeout.
const ownerWait = 30 * time.Second

// ownerPoll is how often a waiting store asks for its share again. The
// wait is polled rather than blocked in flock, so that ctx can end it.
const ownerPoll = 5 * time.Millisecond

// dbFiles is the process's table of the database files whose owner lock
// its stores hold, one descriptor per file (see owner.go). It is the one
// piece of state the package keeps for the whole process, because the
// kernel keeps SQLite's fcntl locks for the whole process too: closing any
// descriptor of a database file drops every fcntl lock the process holds
// on it, those of connections that are still open included, so a
// descriptor opened for the owner lock is never closed. The table lets the
// stores of one process on one file share it, and bounds the descriptors
// to one per database file. shms holds, the same way, the descriptors
// openElsewhere opened on SQLite's shared-memory index files (-shm),
// whose locks SQLite's connections of the process hold too: one per
// index file, opened only when another process has its database open.
var dbFiles = struct {
	mu    sync.Mutex
	files map[fileID]*dbFile
	shms  map[fileID]int
}{files: make(map[fileID]*dbFile), shms: make(map[fileID]int)}

// fileID names a file by its inode, which a rename or a deletion of its
// name does not change, and which no other file takes while a descriptor
// keeps it.
type fileID struct{ dev, ino uint64 }

// dbFile is one database file's descriptor and the process's hold on its
// flock. Fields other than fd are guarded by dbFiles.mu.
type dbFile struct {
	fd int
	// stores counts this process's stores that hold a share: the
	// descriptor holds the flock shared exactly while it is not zero.
	stores int
	// busy is open while one store of this process, alone, takes the flock
	// (and, holding it exclusively, ends leases); the others wait for it
	// to close. flock on one descriptor converts its lock, so a second
	// store that asked for a share then would end the first's
	// exclusivity.
	busy chan struct{}
}

// ownerLock is one store's share of its database file's owner lock.
type ownerLock struct {
	file *dbFile
	name string
	// starting is set while the store holds the lock exclusively, from
	// lockOwner's alone to share.
	starting bool
}

// lockOwner takes the owner lock of the database file at path shared,
// waiting while a starting store holds it exclusively. With exclusive it
// first tries to take it exclusively, and reports whether that was granted
// (alone): no other store, in this process or another, holds it. A store
// granted alone holds the lock exclusively until share or release.
func lockOwner(ctx context.Context, path string, exclusive bool) (l *ownerLock, alone bool, err error) {
	f, err := openDBFile(path)
	if err != nil {
		return nil, false, err
	}
	l = &ownerLock{file: f, name: path}
	for {
		dbFiles.mu.Lock()
		if f.busy == nil {
			break
		}
		busy := f.busy
		dbFiles.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if f.stores > 0 {
		// The descriptor holds the share already, for another store of
		// this process: this one is not alone.
		f.stores++
		dbFiles.mu.Unlock()
		return l, false, nil
	}
	f.busy = make(chan struct{})
	dbFiles.mu.Unlock()

	if exclusive {
		alone, err = l.try(syscall.LOCK_EX)
		if alone {
			l.starting = true
			return l, true, nil
		}
	}
	if err == nil {
		err = l.share(ctx)
	} else {
		l.done(0)
	}
	if err != nil {
		return nil, false, err
	}
	return l, false, nil
}

// openDBFile returns the process's descriptor of the file at path,
// opening it if the process has none.
func openDBFile(path string) (*dbFile, error) {
	dbFiles.mu.Lock()
	defer dbFiles.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	id := fileID{dev: uint64(st.Dev), ino: st.Ino}
	if f, ok := dbFiles.files[id]; ok {
		return f, nil
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		// Kept open and unused: closing it could drop SQLite's locks.
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	opened := fileID{dev: uint64(st.Dev), ino: st.Ino}
	f := &dbFile{fd: fd}
	dbFiles.files[opened] = f
	if opened != id {
		return nil, fmt.Errorf("%s was replaced while the store opened", path)
	}
	return f, nil
}

// share takes the lock shared, for a store that holds it exclusively
// (which turns it into a shared lock) or that holds nothing (which waits
// for it), and ends the store's turn at the descriptor.
func (l *ownerLock) share(ctx context.Context) (err error) {
	give := time.Now().Add(ownerWait)
	for {
		granted, err := l.try(syscall.LOCK_SH)
		if err == nil && !granted && time.Now().After(give) {
			err = fmt.Errorf("%s held exclusively for %v", l.name, ownerWait)
		}
		if err == nil && !granted {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(ownerPoll):
				continue
			}
		}
		if err != nil {
			_ = l.unlock()
			l.done(0)
			return err
		}
		l.starting = false
		l.done(1)
		return nil
	}
}

// done ends a store's turn at the descriptor (dbFile.busy), adding shares
// to the stores that hold it.
func (l *ownerLock) done(shares int) {
	dbFiles.mu.Lock()
	l.file.stores += shares
	close(l.file.busy)
	l.file.busy = nil
	dbFiles.mu.Unlock()
}

// try asks for the lock in how (LOCK_EX or LOCK_SH) without waiting, and
// reports whether it was granted.
func (l *ownerLock) try(how int) (bool, error) {
	for {
		err := syscall.Flock(l.file.fd, how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, fmt.Errorf("flock %s: %w", l.name, err)
	}
}

// unlock drops the descriptor's flock.
func (l *ownerLock) unlock() error {
	if err := syscall.Flock(l.file.fd, syscall.LOCK_UN); err != nil {
		return fmt.Errorf("unlock %s: %w", l.name, err)
	}
	return nil
}

// release gives up the store's share, or its exclusive hold if it never
// took a share. The flock ends when the process's last store gives up its
// share; the descriptor stays open (see dbFiles).
func (l *ownerLock) release() error {
	if l.starting {
		err := l.unlock()
		l.starting = false
		l.done(0)
		return err
	}
	dbFiles.mu.Lock()
	defer dbFiles.mu.Unlock()
	l.file.stores--
	if l.file.stores > 0 {
		return nil
	}
	return l.unlock()
}

// SQLite's unix VFS takes its SHARED lock on the database file as a read
// lock of the bytes sqliteSharedFirst to sqliteSharedFirst+sqliteSharedSize-1,
// and, in WAL mode, keeps it from a connection's first read to its close;
// and every process that has the shared-memory index (the name's -shm)
// open holds a read lock of its byte sqliteShmDMS for as long. The byte
// offsets are SQLite's file format (os_unix.c), the same in every version
// that has WAL mode.
const (
	sqliteSharedFirst = 0x40000000 + 2
	sqliteSharedSize  = 510
	sqliteShmDMS      = 128
)

// openElsewhere reports whether another process has the database file at
// path open in WAL mode (SQLite's shared lock on it is held by another
// process) under another name: no other process has the index beside
// path open. fcntl's F_GETLK reports only other processes' locks, so this
// process's own connections count for neither.
func openElsewhere(path string) (bool, error) {
	f, err := openDBFile(path)
	if err != nil {
		return false, err
	}
	held, err := lockedByAnother(f.fd, sqliteSharedFirst, sqliteSharedSize)
	if err != nil || !held {
		return false, err
	}
	shm, err := openShm(path + "-shm")
	if errors.Is(err, syscall.ENOENT) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	used, err := lockedByAnother(shm, sqliteShmDMS, 1)
	return !used && err == nil, err
}

// lockedByAnother reports whether another process holds an fcntl lock on
// any of the n bytes of the file fd from start.
func lockedByAnother(fd int, start, n int64) (bool, error) {
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: start, Len: n}
		err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read the locks: %w", err)
		}
		return lk.Type != unix.F_UNLCK, nil
	}
}

// openShm returns the process's descriptor of the index file at path,
// opening it if the process has none. Like the database file's (see
// dbFiles), it is never closed: closing it would drop the locks SQLite's
// connections of the process hold on the index, and another process
// would then take the index for unused and rebuild it under them.
func openShm(path string) (int, error) {
	dbFiles.mu.Lock()
	defer dbFiles.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return -1, fmt.Errorf("stat %s: %w", path, err)
	}
	if fd, ok := dbFiles.shms[fileID{dev: uint64(st.Dev), ino: st.Ino}]; ok {
		return fd, nil
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		// Kept open and unused: closing it could drop SQLite's locks.
		return -1, fmt.Errorf("stat %s: %w", path, err)
	}
	dbFiles.shms[fileID{dev: uint64(st.Dev), ino: st.Ino}] = fd
	return fd, nil
}

// fileLinks reports how many hard links the file at path has.
func fileLinks(path string) (links uint64, known bool, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false, err
	}
	return uint64(st.Nlink), true, nil
}
