// Package sqlitestore keeps idempotency keys in SQLite through the pure-Go
// driver modernc.org/sqlite (driver name "sqlite"), so that a service needs
// no cgo and no database server. It implements idemstore.Store, idemstore.Sweeper and
// idemstore.Transactor; a transaction's Driver is a *Tx, which reads and writes
// like a *sql.Tx but cannot commit or roll back.
//
// SQLite lets one connection write at a time. The store is built around
// that: readers never wait (the database runs in WAL mode), a claim that
// loses decides from a plain read, and every write holds the write lock for
// as short a time as it can. A transactional handler is the exception: its
// transaction holds the write lock from its start to its commit, so that it
// never fails half-way on a lock another writer took; keep such handlers
// short, since new keys wait for them.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	// The pure-Go SQLite driver registers itself as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/templates"
)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now.
// Leases and expiry are measured with it; the deadline that ends a
// transactional handler's transaction when its lease runs out uses real
// time.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// WithLockWait sets how long a claim, in total, may wait for SQLite's write
// lock before it fails (default 5s). A claim that loses never waits for it.
func WithLockWait(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.lockWait = d
		}
	}
}

// WithCompletionWait sets how long a completion, release or abandonment may
// wait for SQLite's write lock before it fails (default 2m). It should be
// longer than the longest lease of a transactional operation, whose handler
// holds the lock for up to its lease; the context passed to the call bounds
// the wait too.
func WithCompletionWait(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.completeWait = d
		}
	}
}

// WithDeadHolderRecovery makes a store that opens a database no other
// store has open end the leases of the claims left in flight there: their
// holders are known to be gone, so their retries are taken over (or found
// indeterminate) at once instead of after the lease (docs/semantics.md
// §7.4). It is for a database that only stores made by Open or OpenDB of
// this version use, in any process: a process that reaches the database
// another way (a store made by New, or a version of idemgen that did not
// hold the owner lock, still running beside this one during a deploy)
// holds no lock, so its live claims would look abandoned and a retry would
// run their handlers a second time. Without it a crashed process's claims
// wait out their leases.
func WithDeadHolderRecovery() Option {
	return func(s *Store) { s.recoverDead = true }
}

// Store is an idemstore.Store, idemstore.Sweeper and idemstore.Transactor on one SQLite
// database holding the idempotency_keys table.
type Store struct {
	db     *sql.DB
	ownsDB bool
	// owner is the store's share of the database's owner lock (owner.go),
	// nil for a store made by New, in memory, or off Linux.
	owner *ownerLock
	// orphans counts the leases the store ended when it opened.
	orphans int
	// recoverDead is WithDeadHolderRecovery's: the store may end the
	// leases of dead holders when it opens.
	recoverDead bool
	now         func() time.Time
	lockWait    time.Duration
	// completeWait bounds how long a completion, release or abandonment
	// waits for the write lock (see Store.write).
	completeWait time.Duration
	// writers admits one of this process's writers (a claim's write path,
	// a completion, a release, a claim's handler transaction from the
	// claim to its end) at a time, in the order turn says. SQLite has a
	// single writer anyway; queueing here instead of in SQLite's busy
	// handler, whose retries back off to 100 ms apart, keeps a completion
	// from losing the lock again and again to a storm of new claims, and
	// hands the lock on the moment it frees. Other processes, and keyless
	// transactions of Begin (not BeginTurn), still meet SQLite's own lock.
	writers turn
}

var (
	_ idemstore.Store      = (*Store)(nil)
	_ idemstore.Sweeper    = (*Store)(nil)
	_ idemstore.Transactor = (*Store)(nil)
)

// DSN returns the data source name under which the store expects its
// database to be opened: WAL journal (readers never wait for the writer), a
// busy timeout (writers queue for the lock instead of failing at once),
// foreign keys on, BEGIN IMMEDIATE for transactions (a transaction that
// will write takes the lock up front, instead of failing with SQLITE_BUSY
// when it first writes after another writer committed), and SQLite's
// defensive mode (no statement can write the database's raw pages or its
// schema as data, which would get past what the store refuses a
// handler). path is a file name, or a DSN whose own query parameters are
// kept.
func DSN(path string) string {
	const params = "_txlock=immediate" +
		"&_pragma=busy_timeout(5000)" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)" +
		"&_defensive=1"
	if strings.Contains(path, "?") {
		return path + "&" + params
	}
	return path + "?" + params
}

// Open opens the SQLite database at path with DSN(path) and returns a store
// on it, which holds the database's owner lock as OpenDB describes. The
// schema is not applied: call Migrate, or apply the generated migration.
// Close closes the database.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	s, err := OpenDB(ctx, db, opts...)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	s.ownsDB = true
	return s, nil
}

// OpenDB returns a store on db, which should have been opened with DSN,
// holding the database's owner lock until Close; Close leaves db open.
//
// The owner lock is a flock on the database file itself (its inode, not
// its name), which every store made by Open or OpenDB holds shared while
// it is open, and which the kernel drops when the process dies. With
// WithDeadHolderRecovery, the first store to open a database that no store
// has open anywhere knows that every claim in flight in it was left by a
// process that is gone, killed or crashed, and ends their leases
// (EndedLeases counts them): the next claim of such a request takes it
// over, or marks it indeterminate if it fails closed, at once rather than
// when the lease would have run out (docs/semantics.md §7.4). While any
// other store has the database open, in this process or another, nothing
// is ended: its claims may be live. Without the option a store only holds
// its share, which keeps its own claims safe from a store that recovers.
// An in-memory database, and a platform other than Linux, have no lock
// and end nothing. A database file with more than one hard link is
// refused (ErrHardLinked), wherever the platform reports a file's links,
// and on Linux so is a file that another process has open under another
// name, the file having been renamed or moved while it ran
// (ErrOpenUnderAnotherName).
func OpenDB(ctx context.Context, db *sql.DB, opts ...Option) (*Store, error) {
	s := New(db, opts...)
	if err := s.own(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// New returns a store on db, which should have been opened with DSN: the
// store relies on WAL mode and on transactions that begin IMMEDIATE. Close
// leaves db open.
//
// A store made by New holds no owner lock (see OpenDB): it never ends a
// lease early, and nothing protects its own claims from a store that
// OpenDB or Open makes WithDeadHolderRecovery in another process, which
// would find no lock held and end their leases while they run.
func New(db *sql.DB, opts ...Option) *Store {
	s := &Store{db: db, now: time.Now, lockWait: 5 * time.Second, completeWait: 2 * time.Minute}
	for _, o := range opts {
		o(s)
	}
	return s
}

// DB returns the store's database, for the application's own queries.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database if Open opened it, then gives up the store's
// share of the owner lock. Close a store only once its requests are done:
// a store that opens the database after the last store closed it ends the
// leases of whatever claims are still in flight.
func (s *Store) Close() error {
	var err error
	if s.ownsDB {
		if cerr := s.db.Close(); cerr != nil {
			err = fmt.Errorf("sqlitestore: close: %w", cerr)
		}
	}
	return errors.Join(err, s.releaseOwner())
}

// Migrate applies the SQLite schema that idemgen generates as a migration,
// and the phases' (templates.PhaseSchema).
// It is idempotent, for tests and for services that manage no migrations.
func (s *Store) Migrate(ctx context.Context) error {
	up, _, err := templates.Schema("sqlite")
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	phases, _, err := templates.PhaseSchema("sqlite")
	if err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, up+"\n"+phases); err != nil {
		return fmt.Errorf("sqlitestore: migrate: %w", err)
	}
	return nil
}

// millis converts a time to the unix milliseconds stored in the table.
func millis(t time.Time) int64 { return t.UnixMilli() }

// durMillis converts a duration to whole milliseconds, rounding up so that a
// positive lease never becomes zero. It rounds after dividing: adding first
// would overflow for the longest durations and store a row already expired.
func durMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}
