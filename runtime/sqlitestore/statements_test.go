package sqlitestore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"

	"github.com/idemgen/idemgen/runtime/sqlitestore"
	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
	"github.com/idemgen/idemgen/templates"
)

// docs/semantics.md §6: what each request costs the database, path by
// path, in statements, counted by a driver that wraps the store's.
// Beginning and ending a transaction count as the statements SQLite runs
// for them (BEGIN IMMEDIATE, COMMIT, ROLLBACK). Each wanted statement is
// the start of its text.
func TestStatementsPerRequest(t *testing.T) {
	s, log := countingStore(t)
	paths := enginetest.RequestPaths(t, s, func(ctx context.Context, tx *sqlitestore.Tx, marker string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (marker) VALUES (?)`, marker)
		return err
	})
	const (
		// The claim's read of the key's row, with no lock: a claim that
		// loses decides from it alone.
		read = "SELECT operation, fingerprint, state, lease_token"
		// The claim of a new key: the read again under the write lock,
		// and the insert.
		begin  = "BEGIN IMMEDIATE"
		insert = "INSERT INTO main.idempotency_keys"
		commit = "COMMIT"
		// The completion, fenced by the claim's token.
		complete = "UPDATE main.idempotency_keys SET state = 'completed'"
	)
	want := map[string][]string{
		"new key": {read, begin, read, insert, commit, begin, complete, commit},
		"replay":  {read},
		"conflict: another request with the key (422)": {read},
		"conflict: the key in flight (409)":            {read},
		"transactional new key": {read, begin, read, insert, commit,
			// The handler's transaction: it first checks that the claim
			// is still this request's, and the completion commits with
			// the handler's write.
			begin, "UPDATE main.idempotency_keys SET lease_token = lease_token", "INSERT INTO effects", complete, commit,
			// The check that the handler left no temporary object on the
			// connection before it goes back to the pool.
			"SELECT count(*) FROM temp.sqlite_schema"},
		"transactional replay":                            {read},
		"transactional conflict: the key in flight (409)": {read},
	}
	for _, p := range paths {
		var got []string
		p.Send(func(request func()) {
			before := log.Len()
			request()
			got = log.Since(before)
		})
		storetest.CheckStatements(t, p.Name, got, want[p.Name])
	}
}

// countingStore opens a store on a new database, with the schema and an
// effects table for handlers' writes, whose statements go to log.
func countingStore(t *testing.T) (s *sqlitestore.Store, log *storetest.StatementLog) {
	t.Helper()
	log = &storetest.StatementLog{}
	db := sql.OpenDB(countingConnector{dsn: sqlitestore.DSN(filepath.Join(t.TempDir(), "idem.db")), log: log})
	t.Cleanup(func() { _ = db.Close() })
	up, _, err := templates.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(context.Background(), up+`; CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return sqlitestore.New(db), log
}

// countingConnector opens connections of the SQLite driver that log their
// statements.
type countingConnector struct {
	dsn string
	log *storetest.StatementLog
}

func (c countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.Driver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn: conn.(sqliteConn), log: c.log}, nil
}

func (c countingConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// sqliteConn is what the store uses of a SQLite connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
	sqlite.AuthorizerRegisterer
	sqlite.HookRegisterer
}

// countingConn is a SQLite connection that logs each statement it runs.
type countingConn struct {
	conn sqliteConn
	log  *storetest.StatementLog
}

func (c *countingConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, query: query, log: c.log}, nil
}

func (c *countingConn) Close() error { return c.conn.Close() }

func (c *countingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.log.Add("BEGIN IMMEDIATE") // what the store's DSN makes a transaction begin with
	tx, err := c.conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx: tx, log: c.log}, nil
}

func (c *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.log.Add(query)
	return c.conn.ExecContext(ctx, query, args)
}

func (c *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.Add(query)
	return c.conn.QueryContext(ctx, query, args)
}

func (c *countingConn) ResetSession(ctx context.Context) error { return c.conn.ResetSession(ctx) }

func (c *countingConn) IsValid() bool { return c.conn.IsValid() }

func (c *countingConn) RegisterPreUpdateHook(fn sqlite.PreUpdateHookFn) {
	c.conn.RegisterPreUpdateHook(fn)
}

func (c *countingConn) RegisterCommitHook(fn sqlite.CommitHookFn) { c.conn.RegisterCommitHook(fn) }

func (c *countingConn) RegisterRollbackHook(fn sqlite.RollbackHookFn) {
	c.conn.RegisterRollbackHook(fn)
}

func (c *countingConn) RegisterAuthorizer(fn sqlite.AuthorizerFn) error {
	return c.conn.RegisterAuthorizer(fn)
}

// countingTx logs the end of a transaction.
type countingTx struct {
	tx  driver.Tx
	log *storetest.StatementLog
}

func (t countingTx) Commit() error {
	t.log.Add("COMMIT")
	return t.tx.Commit()
}

func (t countingTx) Rollback() error {
	t.log.Add("ROLLBACK")
	return t.tx.Rollback()
}

// countingStmt logs each run of a prepared statement.
type countingStmt struct {
	driver.Stmt
	query string
	log   *storetest.StatementLog
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.log.Add(s.query)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.log.Add(s.query)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
