package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The owner lock (docs/semantics.md §9) lets a store tell a claim whose
// process has died from a claim that a live process still runs, so that
// the first may be taken over at once instead of after its lease
// (docs/semantics.md §7.4).
//
// SQLite lives on one host, where the kernel knows when a process dies and
// frees its file locks. Every store that Open or OpenDB makes holds a
// shared flock on the database file itself from its start to its Close. A
// store that starts tries the lock exclusively first: if that is granted,
// no store is open on the database anywhere, so every claim in flight was
// made by a process that is gone (or by a store that was closed), and the
// store ends those claims' leases before it takes its own share. The
// invariant: leases are ended only under the exclusive lock, and a store
// makes claims only while it holds its share, so no live store's claim is
// ever ended early.
//
// The lock is on the file's inode, which holds the data the claims are in:
// a file that takes the database's name, or the loss of a name, cannot
// make a new lock that a live store does not hold, and every name of the
// file (a symbolic link, a relative path, a file: URI) reaches the same
// lock. A hard link reaches it too, but SQLite keeps the WAL beside the
// name a process opened, so two names in two directories are two
// databases to SQLite: a file with more than one link is refused
// (ErrHardLinked), and so is a file another process has open under a name
// other than the store's, once the file was renamed under it
// (ErrOpenUnderAnotherName). SQLite locks the same file with fcntl; Linux keeps flock and
// fcntl locks independent (flock(2)), so neither refuses the other. The
// descriptor that holds the flock is never closed (see dbFiles): closing
// it would drop the fcntl locks of every SQLite connection of the process
// on the file.
//
// flock turns an exclusive lock into a shared one by dropping it first, so
// another store starting at that moment may be granted the exclusive lock
// too. That store then ends leases as well, but the store converting has
// not returned from Open and has made no claim yet: every claim it ends
// was left by a dead process. A store that is refused the exclusive lock
// waits for its share, which it gets once the starter's leases are ended.

// own takes the owner lock of s's database for the store's lifetime and,
// with WithDeadHolderRecovery, when no other store has the database open,
// ends the leases that dead processes left behind. An in-memory database,
// and a platform other than Linux (owner_other.go), have no lock: nothing
// is ended early there.
func (s *Store) own(ctx context.Context) error {
	file, err := mainFile(ctx, s.db)
	if err != nil {
		return fmt.Errorf("sqlitestore: owner lock: %w", err)
	}
	if file == "" {
		// In memory: no other process can see the database, and nothing of
		// it outlives its process.
		return nil
	}
	if err := oneName(file); err != nil {
		return fmt.Errorf("sqlitestore: owner lock: %w", err)
	}
	if err := sameNameAsOthers(ctx, file); err != nil {
		return fmt.Errorf("sqlitestore: owner lock: %w", err)
	}
	lock, alone, err := lockOwner(ctx, file, s.recoverDead)
	if err != nil {
		return fmt.Errorf("sqlitestore: owner lock: %w", err)
	}
	if lock == nil {
		return nil
	}
	if alone {
		err = s.endOrphanLeases(ctx)
		if err == nil {
			err = lock.share(ctx)
		}
		if err != nil {
			_ = lock.release()
			return fmt.Errorf("sqlitestore: owner lock: %w", err)
		}
	}
	s.owner = lock
	return nil
}

// ErrHardLinked is the error of Open and OpenDB for a database file that
// has more than one name in the filesystem (hard links). SQLite names a
// database's WAL and its shared-memory index after the name it opened
// the file by: two processes that reach the file by names in different
// directories read and write a WAL each, do not see each other's claims,
// and both win a key. The owner lock, on the file itself, does not tell
// them apart. Give the database one name; symbolic links, relative paths
// and file: URIs are resolved by SQLite to it.
var ErrHardLinked = errors.New("sqlitestore: the database file has more than one hard link, and SQLite keeps a WAL of its own for each name in another directory")

// oneName refuses a database file with more than one hard link
// (ErrHardLinked), where the platform reports its links.
func oneName(file string) error {
	n, known, err := fileLinks(file)
	switch {
	case err != nil:
		return fmt.Errorf("count the links of %s: %w", file, err)
	case known && n > 1:
		return fmt.Errorf("%s has %d names: %w", file, n, ErrHardLinked)
	}
	return nil
}

// ErrOpenUnderAnotherName is the error of Open and OpenDB for a database
// file that another process has open in WAL mode under another name: the
// file was renamed, or moved into place, while that process ran. SQLite
// keeps a WAL and its shared-memory index beside the name a process opened
// the file by, so the claims in the other process's WAL are not in this
// store's, and both would win a key. Renaming or moving the database file
// is a restore: stop every process that has it open first
// (docs/semantics.md §7.4).
var ErrOpenUnderAnotherName = errors.New("sqlitestore: another process has the database file open under another name, and SQLite keeps a WAL of its own for each name")

// sameNameAsOthers refuses a database file that another process has open
// under a name other than file (ErrOpenUnderAnotherName), where the
// platform lets a store see SQLite's locks. A process that has the file
// open in WAL mode holds SQLite's shared lock on it, and a lock on the
// shared-memory index beside the name it opened, from its connection's
// first read to its close: a second process legitimately joining under
// the same name finds that lock beside its own name. A process in the
// middle of opening or closing a connection holds the first lock without
// the second for an instant, so the check is made again for a few
// milliseconds before the store refuses.
func sameNameAsOthers(ctx context.Context, file string) error {
	for try := 1; ; try++ {
		elsewhere, err := openElsewhere(file)
		if err != nil {
			return fmt.Errorf("look for another process's name of %s: %w", file, err)
		}
		if !elsewhere {
			return nil
		}
		if try == nameChecks {
			return fmt.Errorf("%s: %w", file, ErrOpenUnderAnotherName)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(nameCheckPause):
		}
	}
}

// nameChecks and nameCheckPause bound the time sameNameAsOthers waits out
// another process's connection that is opening or closing.
const (
	nameChecks     = 5
	nameCheckPause = 5 * time.Millisecond
)

// mainFile returns the file of db's main database, as SQLite resolved it;
// "" for an in-memory or temporary database. It runs the PRAGMA itself,
// not its table-valued function pragma_database_list: SQLite looks a
// name in a FROM clause up among the database's tables and views first,
// and a view of that name would answer for the pragma (one made before
// handlers were refused such names, see reservedName).
func mainFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `PRAGMA main.database_list`)
	if err != nil {
		return "", fmt.Errorf("find the database file: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", fmt.Errorf("find the database file: %w", err)
		}
		if name == "main" {
			return file, nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("find the database file: %w", err)
	}
	return "", errors.New("find the database file: SQLite lists no main database")
}

// endOrphanLeases ends the lease of every claim in flight, for a store
// that holds the owner lock exclusively, so that their holders are known
// to be gone. Rows are neither deleted nor completed: each is left to the
// lease-expiry rule (docs/semantics.md §3.5), so that the next claim of the
// same request takes it over, or marks it indeterminate when it fails
// closed. A database without the table yet holds no claim.
func (s *Store) endOrphanLeases(ctx context.Context) error {
	var tables int
	if err := s.db.QueryRowContext(ctx, countKeysTable).Scan(&tables); err != nil {
		return fmt.Errorf("end the leases of dead processes: %w", err)
	}
	if tables == 0 {
		return nil
	}
	res, err := s.db.ExecContext(ctx, endLeases, millis(s.now()))
	if err != nil {
		return fmt.Errorf("end the leases of dead processes: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("end the leases of dead processes: %w", err)
	}
	s.orphans = int(n)
	return nil
}

// EndedLeases reports how many claims in flight the store found left by
// processes that are gone when it opened, and whose leases it ended (zero
// when another store had the database open, see Open).
func (s *Store) EndedLeases() int { return s.orphans }

// releaseOwner gives up the store's share of the owner lock, if it holds
// one.
func (s *Store) releaseOwner() error {
	if s.owner == nil {
		return nil
	}
	err := s.owner.release()
	s.owner = nil
	if err != nil {
		return fmt.Errorf("sqlitestore: release the owner lock: %w", err)
	}
	return nil
}
