//go:build linux

package sqlitestore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// The ways a file beside the database can go while stores run: a tmp
// cleaner or an operator deletes it, or a restore renames another file over
// it.
var lockFileFates = map[string]func(t *testing.T, path string){
	"deleted": func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	},
	"renamed over": func(t *testing.T, path string) {
		other := filepath.Join(filepath.Dir(path), "other")
		if err := os.WriteFile(other, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, path); err != nil {
			t.Fatal(err)
		}
	},
}

// A store holds a live claim; the file named like a lock beside the
// database (where stores once kept the owner lock) is deleted or replaced;
// a second store opens with recovery. It must find the first alive: it
// ends no lease, and a retry of the claim loses to the claim that runs.
func TestReplacedLockFileEndsNoLiveClaim(t *testing.T) {
	for name, fate := range lockFileFates {
		t.Run(name, func(t *testing.T) {
			path := newOwnerDB(t)
			live := openOwner(t, path)
			ctx := context.Background()
			for _, c := range []idemstore.Claim{
				ownerClaim("k-tx", "tok-live-tx", idemstore.Takeover),
				ownerClaim("k-closed", "tok-live-closed", idemstore.FailClosed),
			} {
				if res, err := live.Claim(ctx, c); err != nil || !res.Won {
					t.Fatalf("Claim %s = %+v, %v", c.Key, res, err)
				}
			}
			fate(t, path+"-idem.lock")

			other := openOwner(t, path)
			if n := other.EndedLeases(); n != 0 {
				t.Errorf("a store opened beside a live one ended %d leases", n)
			}
			claimsStandInFlight(t, other, "beside a live store")
		})
	}
}

// The same with the live claims in another process, which only the kernel
// can vouch for. The claims hold no transaction open, so that nothing but
// the owner lock stands between them and a store that ends leases.
func TestReplacedLockFileEndsNoClaimOfALiveProcess(t *testing.T) {
	for name, fate := range lockFileFates {
		t.Run(name, func(t *testing.T) {
			path := newOwnerDB(t)
			child := ownerChild(t, "claim-plain", path)
			fate(t, path+"-idem.lock")

			s := openOwner(t, path)
			if n := s.EndedLeases(); n != 0 {
				t.Errorf("a store opened beside a live process ended %d leases", n)
			}
			claimsStandInFlight(t, s, "beside a live process")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			kill9(t, child)
			claimsEndedAtOnce(t, openOwner(t, path), time.Now())
		})
	}
}

// Every name of the database reaches the one lock: a store opened through
// a symbolic link or a file: URI beside a live store, of this process or
// another, ends nothing, and the retry loses to the live claim. (A file
// with a hard link is refused: TestASecondNameOfTheDatabaseDoesNotWinAHeldKey.)
func TestEveryNameOfTheDatabaseMeetsOneLock(t *testing.T) {
	path := newOwnerDB(t)
	dir := filepath.Dir(path)
	soft := filepath.Join(dir, "soft.db")
	if err := os.Symlink(path, soft); err != nil {
		t.Fatal(err)
	}
	names := []string{soft, "file:" + dir + "//./idem.db?cache=private"}
	t.Run("this process", func(t *testing.T) {
		live := openOwner(t, path)
		if res, err := live.Claim(context.Background(), ownerClaim("k-tx", "tok-live", idemstore.Takeover)); err != nil || !res.Won {
			t.Fatalf("Claim = %+v, %v", res, err)
		}
		for _, name := range names {
			s := openOwner(t, name)
			if n := s.EndedLeases(); n != 0 {
				t.Errorf("a store opened as %s beside a live one ended %d leases", name, n)
			}
			res, err := s.Claim(context.Background(), ownerClaim("k-tx", "tok-retry", idemstore.Takeover))
			if res.Won || err != nil {
				t.Errorf("opened as %s: retry = %+v, %v; want lost to the live claim", name, res, err)
			}
		}
	})
	t.Run("another process", func(t *testing.T) {
		ownerChild(t, "claim-plain", path)
		for _, name := range names {
			s := openOwner(t, name)
			if n := s.EndedLeases(); n != 0 {
				t.Errorf("a store opened as %s beside a live process ended %d leases", name, n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A store's owner lock is held on the database file, which SQLite locks
// with fcntl; the kernel drops every fcntl lock of a process on a file
// when the process closes any descriptor of it. Closing a store must leave
// the locks of the process's other connections to the file alone.
func TestClosingAStoreKeepsSQLitesLocks(t *testing.T) {
	path := newOwnerDB(t)
	db, err := sql.Open("sqlite", sqlitestore.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`SELECT count(*) FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	if !sqliteLocked(t, path) {
		t.Fatal("SQLite holds no lock on the database of an open connection; nothing to check")
	}
	for range 2 {
		s, err := sqlitestore.OpenDB(context.Background(), db, sqlitestore.WithDeadHolderRecovery())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !sqliteLocked(t, path) {
			t.Fatal("closing a store dropped the locks SQLite's open connection holds on the database")
		}
	}
}

// sqliteLocked reports whether this process holds an fcntl lock on the
// file at path, as an open-file-description lock, which conflicts with the
// process's own fcntl locks, sees it. The descriptor it asks on is kept
// open for the test: closing it would drop the very locks it looks for.
func sqliteLocked(t *testing.T, path string) bool {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	return lk.Type != unix.F_UNLCK
}
