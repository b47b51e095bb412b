// Package database opens the service's database, applies its schema and
// adapts its connections and transactions to the ledger.
package database

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
)

//go:embed schema/*.sql
var businessSchema embed.FS

// DefaultSQLiteFile is the database used when no URL is given.
const DefaultSQLiteFile = "petstore-payments.db"

// DB is an open database of either dialect.
type DB struct {
	// Dialect says which of Pool and SQL is set.
	Dialect ledger.Dialect
	// Pool is the PostgreSQL pool.
	Pool *pgxpool.Pool
	// SQL is the SQLite handle.
	SQL *sql.DB
	// Name describes the database for logs, without credentials.
	Name string
}

// Open connects to rawURL: postgres:// or postgresql:// selects PostgreSQL,
// sqlite:PATH or file:PATH an SQLite file, and "" the default SQLite file in
// the working directory. inFlight is the number of requests the service
// serves at once (0 for none in particular): a PostgreSQL pool opens at
// least that many connections plus spareConns, unless the URL's
// pool_max_conns says otherwise.
func Open(ctx context.Context, rawURL string, inFlight int) (*DB, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return openPostgres(ctx, rawURL, inFlight)
	case rawURL == "":
		return openSQLite(ctx, DefaultSQLiteFile, "")
	case strings.HasPrefix(rawURL, "sqlite:"), strings.HasPrefix(rawURL, "file:"):
		rest := rawURL[strings.Index(rawURL, ":")+1:]
		rest = strings.TrimPrefix(rest, "//")
		file, query, _ := strings.Cut(rest, "?")
		if file == "" {
			return nil, fmt.Errorf("database URL %q names no file", Redact(rawURL))
		}
		return openSQLite(ctx, file, query)
	}
	// Not even the redacted URL is shown: a string that is no URL at all
	// may be a password pasted into the wrong place.
	if scheme, _, ok := strings.Cut(rawURL, ":"); ok && urlScheme.MatchString(scheme) {
		return nil, fmt.Errorf("database URL of scheme %q: want postgres://…, sqlite:PATH or file:PATH", scheme)
	}
	return nil, errors.New("the database URL is not of the form postgres://…, sqlite:PATH or file:PATH")
}

// invalidCatalogName is PostgreSQL's SQLSTATE for "database does not
// exist".
const invalidCatalogName = "3D000"

// urlScheme is a URL scheme as RFC 3986 spells it.
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// spareConns are the pool's connections beyond the requests served at
// once, for what admission does not bound: readiness checks and the
// sweeper.
const spareConns = 2

func openPostgres(ctx context.Context, rawURL string, inFlight int) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	// pgx's default pool is max(4, CPUs) connections. A transfer holds its
	// connection through its whole handler, so with fewer connections than
	// requests admitted at once a replay, which needs a connection for a
	// moment, waited behind handlers it has nothing to do with: under a
	// retry storm, past its client's patience.
	if !strings.Contains(rawURL, "pool_max_conns=") && inFlight > 0 {
		cfg.MaxConns = max(cfg.MaxConns, int32(inFlight+spareConns))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == invalidCatalogName {
			// The service does not create its database: that takes a
			// privilege a service should not hold.
			return nil, fmt.Errorf("connect to PostgreSQL: %w; create the database first, e.g. createdb %s", err, cfg.ConnConfig.Database)
		}
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	name := "postgres://" + cfg.ConnConfig.Host + "/" + cfg.ConnConfig.Database
	return &DB{Dialect: ledger.Postgres, Pool: pool, Name: name}, nil
}

// sqliteParams are the connection settings every SQLite connection gets.
// WAL lets readers run beside the one writer; busy_timeout makes a writer
// wait for the lock instead of failing; _txlock=immediate makes every
// transaction take the write lock at BEGIN, so two transactions never
// deadlock upgrading a read lock. synchronous=NORMAL in WAL mode survives a
// crash of the process (kill -9), though not of the machine.
const sqliteParams = "_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"

func openSQLite(ctx context.Context, file, query string) (*DB, error) {
	dsn := "file:" + file + "?" + sqliteParams
	if query != "" {
		dsn += "&" + query
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open SQLite %s: %w", file, err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open SQLite %s: %w", file, err)
	}
	return &DB{Dialect: ledger.SQLite, SQL: db, Name: "sqlite:" + file}, nil
}

// Close closes the database.
func (d *DB) Close() {
	if d.Pool != nil {
		d.Pool.Close()
	}
	if d.SQL != nil {
		_ = d.SQL.Close()
	}
}

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if d.Pool != nil {
		return d.Pool.Ping(ctx)
	}
	return d.SQL.PingContext(ctx)
}

// Conn is the database outside any transaction, one statement at a time.
func (d *DB) Conn() ledger.DB {
	if d.Pool != nil {
		return Pgx(d.Pool)
	}
	return SQL(d.SQL)
}

// Tx is a plain database transaction, for transactional handlers that run
// without the idempotency layer.
type Tx struct {
	ledger.DB
	commit   func(context.Context) error
	rollback func(context.Context) error
}

// Commit commits the transaction.
func (t *Tx) Commit(ctx context.Context) error { return t.commit(ctx) }

// Rollback rolls the transaction back; after Commit it does nothing.
func (t *Tx) Rollback(ctx context.Context) error { return t.rollback(ctx) }

// Begin starts a transaction.
func (d *DB) Begin(ctx context.Context) (*Tx, error) {
	if d.Pool != nil {
		tx, err := d.Pool.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		return &Tx{
			DB:     Pgx(tx),
			commit: tx.Commit,
			rollback: func(ctx context.Context) error {
				if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
					return err
				}
				return nil
			},
		}, nil
	}
	tx, err := d.SQL.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &Tx{
		DB:     SQL(tx),
		commit: func(context.Context) error { return tx.Commit() },
		rollback: func(context.Context) error {
			if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
				return err
			}
			return nil
		},
	}, nil
}

// migrationLockID is the advisory lock that serializes schema changes when
// several servers start at once on one PostgreSQL database.
const migrationLockID = 7_361_024_118

// Migrate applies the business schema, then every *.up.sql file of
// idempotency/<dialect>/ in name order: the key table's, the recovery
// points' and the outbox's, as idemgen generated them. Each is applied
// once and recorded in schema_migrations, so starting the server again, or
// two servers at once, is harmless.
func (d *DB) Migrate(ctx context.Context, idempotency fs.FS) error {
	type migration struct{ name, sql string }
	business, err := businessSchema.ReadFile("schema/" + d.Dialect.String() + ".sql")
	if err != nil {
		return fmt.Errorf("read business schema: %w", err)
	}
	all := []migration{{"business/0001_tables.sql", string(business)}}
	dir := d.Dialect.String()
	entries, err := fs.ReadDir(idempotency, dir)
	if err != nil {
		return fmt.Errorf("read idempotency migrations: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".up.sql") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no idempotency migrations for %s", dir)
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(idempotency, path.Join(dir, n))
		if err != nil {
			return fmt.Errorf("read migration %s: %w", n, err)
		}
		all = append(all, migration{"idempotency/" + n, string(b)})
	}
	if d.Pool != nil {
		return d.migratePostgres(ctx, func(yield func(name, sql string) error) error {
			for _, m := range all {
				if err := yield(m.name, m.sql); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return d.migrateSQLite(ctx, func(yield func(name, sql string) error) error {
		for _, m := range all {
			if err := yield(m.name, m.sql); err != nil {
				return err
			}
		}
		return nil
	})
}

type migrations func(yield func(name, sql string) error) error

func (d *DB) migratePostgres(ctx context.Context, each migrations) error {
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLockID)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLockID))
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return each(func(name, sql string) error {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE name = $1)`, name).Scan(&done); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if done {
			return nil
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		// Without arguments pgx sends the file over the simple protocol,
		// which accepts several statements at once.
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1)`, name); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		return nil
	})
}

func (d *DB) migrateSQLite(ctx context.Context, each migrations) error {
	if _, err := d.SQL.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return each(func(name, sql string) error {
		// The transaction begins IMMEDIATE (see sqliteParams), so a second
		// process migrating the same file waits here and then sees the row.
		tx, err := d.SQL.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		defer func() { _ = tx.Rollback() }()
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if n > 0 {
			return nil
		}
		if _, err := tx.ExecContext(ctx, sql); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (name) VALUES (?)`, name); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		return nil
	})
}
