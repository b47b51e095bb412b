package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ClaimTx implements idemstore.Transactor.
//
// The claim commits on its own first, in Claim's short write transaction, so
// that every other request sees the key in flight without waiting. Then the
// handler's transaction begins and, with its first statement, takes the
// write lock and checks that the claim is still held. The completion is
// written in that transaction by Commit: the handler's writes and the
// completion commit together or not at all.
//
// The transaction keeps this process's write turn (Store.writers) from the
// claim to its end, when it is committed or released or its lease runs
// out. So a won claim does not queue a second time for the lock, behind
// every writer that came after it: only another process, or a keyless
// transaction (Begin), can take the lock between the claim's commit and
// the handler's first statement. And the writers that wait meanwhile wait
// for the turn, which is handed to the next of them in the turn's order
// the moment the transaction ends, rather than for SQLite's lock, which
// its busy handler polls at intervals that grow to 100 ms, to be taken by
// whichever poll comes first.
//
// The handler's transaction ends when the lease runs out: database/sql rolls
// it back once its context is done. A hung handler therefore cannot hold
// SQLite's only write lock past its lease (but for the Go code that
// database/sql runs inside a call, see Tx), and a retry can take the key
// over; the late handler's Commit then reports ErrFenced. ctx bounds the
// claim only: the transaction outlives it, so that a client that hangs up
// does not roll back a handler that is still running. The wait context
// (idemstore.WithWait) bounds the claim's wait for the lock as it bounds
// Claim's.
//
// The handler cannot end the transaction with a raw COMMIT, ROLLBACK or
// BEGIN either: while it runs, the connection's authorizer refuses every
// transaction statement. A handler that committed on its own would have
// made its effects durable with the claim still in flight, for a takeover
// to repeat once the lease ran out.
func (s *Store) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	var t *storeTx
	res, err := s.claim(ctx, c, func(pass func()) (err error) {
		t, err = s.beginHeld(ctx, c, pass)
		return err
	})
	switch {
	case err != nil && res.Won:
		// The claim is ours but the handler cannot run: free the key so
		// that a retry is not turned away until the lease runs out.
		if rerr := s.Release(context.WithoutCancel(ctx), c.Identity, c.Token); rerr != nil && !errors.Is(rerr, idemstore.ErrFenced) {
			err = errors.Join(err, rerr)
		}
		return idemstore.Result{}, nil, err
	case err != nil || !res.Won:
		return res, nil, err
	}
	return res, t, nil
}

// beginHeld begins the handler's transaction of c's won claim, holding
// this process's write turn, and checks that the claim still stands. When
// it succeeds the transaction owns the turn and passes it on (pass) when
// it ends or its lease runs out, whichever comes first.
func (s *Store) beginHeld(ctx context.Context, c idemstore.Claim, pass func()) (*storeTx, error) {
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Lease)
	t := &storeTx{s: s, ctx: txCtx, cancel: cancel, id: c.Identity, token: c.Token, held: true}
	fail := func(err error) (*storeTx, error) {
		t.close()
		return nil, fmt.Errorf("sqlitestore: begin handler transaction: %w", err)
	}
	if err := s.begin(ctx, t); err != nil {
		return fail(err)
	}
	id := c.Identity
	if err := fenced(t.tx.ExecContext(txCtx, holdClaim, id.Tenant, id.Scope, id.Key, c.Token)); err != nil {
		_ = t.tx.Rollback()
		return fail(err)
	}
	// Whichever comes first passes the turn, once: the lease's end, or
	// close. stop reports whether it kept the lease's end from running.
	stop := context.AfterFunc(txCtx, pass)
	t.passTurn = func() {
		if stop() {
			pass()
		}
	}
	t.handlerOwns.Store(true)
	return t, nil
}

// begin begins t's transaction under t.ctx, on a connection of its own
// whose authorizer refuses every transaction statement while the handler
// owns it (authorize); ctx bounds taking the connection. Held and keyless
// transactions alike: a handler that could COMMIT a keyless or durable-mode
// transaction itself would keep writes the engine then rolls back and
// releases, for a retry to repeat. t.close undoes it.
func (s *Store) begin(ctx context.Context, t *storeTx) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	t.conn = conn
	if err := conn.Raw(func(dc any) error {
		ar, ok := dc.(sqlite.AuthorizerRegisterer)
		hr, hooks := dc.(sqlite.HookRegisterer)
		if !ok || !hooks {
			return fmt.Errorf("the driver connection %T has no authorizer or hooks", dc)
		}
		hr.RegisterRollbackHook(func() { t.rolledBack.Store(true) })
		hr.RegisterCommitHook(t.commitHook)
		return ar.RegisterAuthorizer(t.authorize)
	}); err != nil {
		return err
	}
	t.authorized = true
	sqlTx, err := conn.BeginTx(t.ctx, nil)
	if err != nil {
		return err
	}
	t.tx, t.h = sqlTx, &Tx{tx: sqlTx, lease: t.ctx, owner: t}
	t.stopPastLease = context.AfterFunc(t.ctx, func() { t.rollBackPastLease(conn) })
	return nil
}

// rollBackPastLease rolls the transaction back on its driver connection
// itself once its lease has run out, when database/sql's own rollback has
// not done it within rollbackGrace. database/sql's rollback waits for the
// transaction's rows to close, and a sql.Scanner of the handler's that
// hangs in Rows.Scan or Row.Scan keeps them open: the transaction, with
// SQLite's only write lock, would stay open for as long. The driver's
// connection is used under database/sql's lock of it (sql.Conn.Raw), so
// never beside a call of the handler's; a call hung inside that lock (an
// argument's driver.Valuer of a prepared statement, docs/semantics.md
// §5.2) still holds it, and this waits for the call. The authorizer lets
// the ROLLBACK through, the lease having run out; database/sql's own
// rollback, once the rows let it, finds no transaction, and discards the
// connection.
func (t *storeTx) rollBackPastLease(conn *sql.Conn) {
	if !errors.Is(t.ctx.Err(), context.DeadlineExceeded) {
		return
	}
	time.Sleep(rollbackGrace)
	if t.rolledBack.Load() {
		return
	}
	_ = conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok || t.rolledBack.Load() {
			return nil
		}
		_, err := ex.ExecContext(context.Background(), "ROLLBACK", nil)
		return err
	})
}

// rollbackGrace is how long rollBackPastLease leaves database/sql to roll
// a transaction back at its lease's end: at once, but for a statement it
// interrupts first.
const rollbackGrace = 100 * time.Millisecond

// authorize is the authorizer of a handler transaction's connection: while
// the handler owns the transaction it may not end it or start another. Once
// the lease's deadline has passed, database/sql's own ROLLBACK must pass,
// and nothing else: a handler's statement list still running then
// (database/sql waits for it before rolling back) could otherwise end with
// a COMMIT, or with a ROLLBACK followed by writes in autocommit mode, and
// keep writes the engine reports as rolled back.
//
// Nor may the handler change the connection for the requests that use it
// after its own (see sessionAction); the temporary objects it creates are
// dropped instead, when the transaction ends (resetSession). Nor may it
// make what the store's own statements on the connection act on (see
// storeObject), nor write the store's tables (storeWrite) but in the
// store's own statements (storeWrites), nor make an object named as
// SQLite's own (reservedName). A table or a trigger it makes, or a table,
// view, index or trigger it drops, is looked at before the transaction commits
// (madeTable, madeTrigger),
// when the authorizer refuses the store's tables' writes to the
// statements that look (checking).
//
// Once SQLite has rolled the transaction back on its own (see rolledBack),
// nothing more of the handler's runs: it would run outside any
// transaction.
func (t *storeTx) authorize(action sqlite.AuthorizerActionCode, op, arg2, _, _ string) sqlite.AuthorizerReturnCode {
	if !t.handlerOwns.Load() {
		if t.checking.Load() && storeWrite(action, op) {
			return sqlite.AuthorizerDeny
		}
		return sqlite.AuthorizerOK
	}
	rollback := action == sqlite.AuthTransaction && op == "ROLLBACK"
	switch {
	case t.rolledBack.Load():
		return sqlite.AuthorizerDeny
	case t.ctx.Err() != nil && !rollback:
		return sqlite.AuthorizerDeny
	case t.ctx.Err() == nil && action == sqlite.AuthTransaction:
		return sqlite.AuthorizerDeny
	case sessionAction(action, op):
		return sqlite.AuthorizerDeny
	case storeObject(action, op, arg2):
		return sqlite.AuthorizerDeny
	case !t.own && storeWrite(action, op) && !t.storeWrites.Load():
		return sqlite.AuthorizerDeny
	case reservedName(action, op):
		return sqlite.AuthorizerDeny
	case action == sqlite.AuthCreateTable || action == sqlite.AuthCreateTempTable:
		t.madeTable.Store(true)
		t.madeTrigger.Store(true)
	case action == sqlite.AuthCreateTrigger || remadeTable(action):
		t.madeTrigger.Store(true)
	}
	return sqlite.AuthorizerOK
}

// remadeTable reports whether a statement drops a table or a view, or
// makes a view or a virtual table, or drops an index or a trigger: what
// a trigger already there writes through a name changes with it (a step
// that wrote a view, and failed for it, writes the table made in its
// place), or whether it can be coded at all (an UPSERT's ON CONFLICT
// target needs its unique index, a step that writes a view the view's
// INSTEAD OF trigger), so Commit looks at the triggers again
// (madeTrigger), as after a CREATE TRIGGER: the transaction that breaks
// a trigger is the one refused, not every later one that makes a table.
// (A handler may not ALTER a table, see storeObject.)
func remadeTable(action sqlite.AuthorizerActionCode) bool {
	switch action {
	case sqlite.AuthCreateView, sqlite.AuthCreateTempView, sqlite.AuthCreateVTable,
		sqlite.AuthDropTable, sqlite.AuthDropTempTable, sqlite.AuthDropView,
		sqlite.AuthDropTempView, sqlite.AuthDropVTable,
		sqlite.AuthDropIndex, sqlite.AuthDropTempIndex,
		sqlite.AuthDropTrigger, sqlite.AuthDropTempTrigger:
		return true
	}
	return false
}

// reservedName reports whether a handler's statement makes an object, of
// main's or a temporary one, named as SQLite names its own: pragma_…, the
// table-valued functions of the pragmas, or sqlite_… but for the objects
// SQLite makes itself in a statement of the handler's (sqliteMade).
// SQLite looks a name in a FROM clause up among the tables and views
// before its table-valued functions, so a view pragma_database_list would
// answer for the pragma in the statements that read it: the store's,
// which find the database file for the owner lock (mainFile), and
// Commit's checks, which read pragma_foreign_key_list and
// pragma_table_xinfo. SQLite folds ASCII case only; lowering the name
// all refuses no fewer.
func reservedName(action sqlite.AuthorizerActionCode, name string) bool {
	switch action {
	case sqlite.AuthCreateTable, sqlite.AuthCreateTempTable, sqlite.AuthCreateView,
		sqlite.AuthCreateTempView, sqlite.AuthCreateVTable, sqlite.AuthCreateTrigger,
		sqlite.AuthCreateTempTrigger, sqlite.AuthCreateIndex, sqlite.AuthCreateTempIndex:
		name = strings.ToLower(name)
		if strings.HasPrefix(name, "pragma_") {
			return true
		}
		if !strings.HasPrefix(name, "sqlite_") {
			return false
		}
		if action == sqlite.AuthCreateIndex || action == sqlite.AuthCreateTempIndex {
			return !strings.HasPrefix(name, "sqlite_autoindex_")
		}
		return !sqliteMade[name]
	}
	return false
}

// sqliteMade are the tables SQLite makes itself, asking the authorizer as
// for the handler's own: for a table with AUTOINCREMENT, and for ANALYZE.
// (The indexes it makes for a table's PRIMARY KEY and UNIQUE constraints
// are sqlite_autoindex_….) SQLite refuses a statement's own object any
// sqlite_ name.
var sqliteMade = map[string]bool{
	"sqlite_sequence": true, "sqlite_stat1": true, "sqlite_stat2": true,
	"sqlite_stat3": true, "sqlite_stat4": true,
}

// storeWrite reports whether a statement writes one of the store's tables
// (an INSERT, UPDATE or DELETE of it, whether the handler's own statement
// or a trigger's or a view's that the statement fires: SQLite asks the
// authorizer about those too, as it codes them into the statement that
// fires them, also when a statement prepared earlier is prepared again
// after the schema changed). A handler's write there would change what
// another request stored: forge its answer, delete its key for a retry to
// run again, rewrite an effect it staged.
func storeWrite(action sqlite.AuthorizerActionCode, table string) bool {
	switch action {
	case sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete:
		return storeTables[strings.ToLower(table)]
	}
	return false
}

// storeObject reports whether a handler's statement would change what the
// store's own statements on its connection act on, or what a later
// migration of the store finds: an object named as one of the store's
// tables or indexes (the store's statements name main's tables, so a
// temporary one of that name no longer stands in for one; this refuses it
// all the same, and a table or index of main made under a store's name
// that is not there yet, the outbox's or the phases' before their
// migrations, would be kept by the migration's CREATE … IF NOT EXISTS); a
// trigger or an index on one of the store's tables (a trigger could undo
// the completion after it ran, a unique index refuse the store's writes),
// or one of their indexes dropped; a table dropped; or any table altered.
// ALTER TABLE shows the authorizer a table's old name only, never the
// name a RENAME gives it, nor which change it makes, so a handler may not
// alter a table at all: a table of its own renamed to the name of a store
// table not there yet would be that table, trigger and all.
// For a table, a view or a virtual table, name is the object's name; for
// a trigger or an index, name is its own and table the table it is on.
// Nor may a handler read or write the database's raw pages (rawTables).
func storeObject(action sqlite.AuthorizerActionCode, name, table string) bool {
	name, table = strings.ToLower(name), strings.ToLower(table)
	switch action {
	case sqlite.AuthCreateTable, sqlite.AuthCreateTempTable, sqlite.AuthCreateView,
		sqlite.AuthCreateTempView, sqlite.AuthCreateVTable, sqlite.AuthDropTable,
		sqlite.AuthDropTempTable, sqlite.AuthDropVTable:
		return storeTables[name] || storeIndexes[name]
	case sqlite.AuthCreateTrigger, sqlite.AuthCreateTempTrigger, sqlite.AuthCreateIndex,
		sqlite.AuthCreateTempIndex, sqlite.AuthDropIndex, sqlite.AuthDropTempIndex:
		return storeTables[table] || storeTables[name] || storeIndexes[name]
	case sqlite.AuthAlterTable:
		return true
	case sqlite.AuthRead, sqlite.AuthInsert, sqlite.AuthUpdate, sqlite.AuthDelete:
		return rawTables[name]
	}
	return false
}

// rawTables are the virtual tables of the database file's raw pages,
// through which a statement could write what the authorizer refuses (a
// trigger on the store's table, spelt otherwise and patched in place);
// DSN's defensive mode makes them read-only, and a handler may not touch
// them at all.
var rawTables = map[string]bool{"sqlite_dbpage": true, "dbstat": true}

// storeTables are the tables of the store's migrations, by SQLite's
// case-insensitive name.
var storeTables = map[string]bool{
	"idempotency_keys": true, "idempotency_phases": true, "idempotency_outbox": true,
}

// storeIndexes are the indexes of the store's migrations, by SQLite's
// case-insensitive name; tables, views and indexes share one namespace.
var storeIndexes = map[string]bool{
	"idempotency_keys_expires_at_idx": true, "idempotency_phases_expires_at_idx": true,
	"idempotency_outbox_delivered_idx": true, "idempotency_outbox_due_idx": true,
	"idempotency_outbox_request_idx": true, "idempotency_outbox_undelivered_idx": true,
	"idempotency_outbox_pending_key_idx": true,
}

// commitHook is the commit hook of a handler transaction's connection: it
// turns into a rollback every commit made while the handler owns the
// transaction, or once SQLite has rolled it back. Inside the transaction
// nothing commits until the store commits it; outside it, after SQLite
// ended it on its own, a write would run in autocommit mode and commit at
// once, beyond the reach of the release that follows, for a retry to
// repeat. The authorizer refuses such statements when they are prepared;
// this stops one the handler prepared before.
func (t *storeTx) commitHook() int32 {
	if t.handlerOwns.Load() || t.rolledBack.Load() {
		return 1
	}
	return 0
}

// sessionAction reports whether a handler's statement would change its
// connection beyond its transaction, for whichever request the pool hands
// the connection to next: an attached database stays attached, and a
// PRAGMA's setting stays set (busy_timeout, query_only, synchronous,
// locking_mode and the rest). Neither can be undone reliably once made, so
// neither is allowed. A PRAGMA that only describes the schema is, and so
// is defer_foreign_keys, which SQLite resets when the transaction ends.
// The authorizer sees a PRAGMA's argument but not whether it is a value to
// set or a table to describe (PRAGMA busy_timeout = 1, PRAGMA
// table_info(t)), so pragmas are told apart by name alone: reading a
// setting is refused with setting it.
func sessionAction(action sqlite.AuthorizerActionCode, pragma string) bool {
	switch action {
	case sqlite.AuthAttach, sqlite.AuthDetach:
		return true
	case sqlite.AuthPragma:
		return !describingPragmas[strings.ToLower(pragma)]
	}
	return false
}

// describingPragmas are the pragmas a handler may run: they read the
// schema or check the database, and change nothing on the connection.
var describingPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true,
	"index_info": true, "index_xinfo": true, "index_list": true,
	"foreign_key_list": true, "foreign_key_check": true,
	"integrity_check": true, "quick_check": true,
	"database_list": true, "collation_list": true, "function_list": true,
	"module_list": true, "pragma_list": true, "compile_options": true,
	"defer_foreign_keys": true,
}

// close ends what begin set up, once the transaction has ended: the
// authorizer comes off the connection and whatever temporary objects the
// handler made are dropped (resetSession) before it goes back to the pool,
// and the lease's deadline is released. A connection that cannot be given
// back so is discarded rather than pooled. A held transaction passes its
// write turn on first: the connection's cleanup does not take the lock.
// A second call does nothing.
func (t *storeTx) close() {
	t.handlerOwns.Store(false)
	if t.stopPastLease != nil {
		t.stopPastLease()
	}
	if t.passTurn != nil {
		t.passTurn()
	}
	if t.conn != nil {
		var err error
		if t.authorized {
			err = t.conn.Raw(func(dc any) error {
				hr := dc.(sqlite.HookRegisterer)
				hr.RegisterCommitHook(nil)
				hr.RegisterRollbackHook(nil)
				return dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(nil)
			})
			if err == nil {
				err = resetSession(t.conn)
			}
		}
		if err != nil {
			_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = t.conn.Close()
		t.conn = nil
	}
	t.cancel()
	if t.h != nil {
		t.h.end()
	}
}

// resetSession drops every temporary table, view, index and trigger on
// conn, which must be outside any transaction: a TEMP table one tenant's
// handler filled would otherwise be read by the next request on the
// connection, whoever's it is, and a TEMP trigger on a main table would
// act on its writes. SQLite drops the whole temporary database when the
// temp_store setting changes, so the setting is changed and changed back;
// that is done only when the temporary schema holds anything, as it
// rarely does. A transaction rolled back has dropped what it created
// already.
func resetSession(conn *sql.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	var objects int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM temp.sqlite_schema`).Scan(&objects); err != nil || objects == 0 {
		return err
	}
	var store int
	if err := conn.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&store); err != nil {
		return err
	}
	other := (store + 1) % 3
	for _, v := range []int{other, store} {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA temp_store = %d`, v)); err != nil {
			return err
		}
	}
	return nil
}

// resetTimeout bounds resetSession. Its statements run in this process and
// do not wait for a lock, so it runs out only on a database that fails.
const resetTimeout = 5 * time.Second

// Begin implements idemstore.Transactor: a plain transaction for a keyless
// request. With a database opened by DSN it begins IMMEDIATE.
//
// The handler can no more end it than a held one (begin). ctx bounds the
// start only: database/sql rolls back a transaction once the context it
// began with is done, and the engine begins under a store context that
// ends as soon as Begin returns. The transaction lives on under a context
// of its own until Commit or Rollback, or until lease has passed, as a held
// one does (ClaimTx): a hung handler then loses its writes rather than
// holding the database's only write lock for ever.
func (s *Store) Begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("sqlitestore: begin: lease (%v) must be positive", lease)
	}
	return s.beginKeyless(ctx, lease, nil)
}

// BeginTurn is Begin in this process's write turn (Store.writers), as a
// background writer: it waits for the turn, for as long as ctx allows,
// behind the completions and releases and behind the claims, but never
// passed over by claims for longer than 100 ms, and the transaction keeps
// the turn until it ends or lease runs out. It is for the process's own
// writers beside its requests (an outbox's runners, an operator's
// writes): under a storm of requests a transaction that polled SQLite's
// lock (Begin) could lose it, over and over, to the writers the turn
// hands it to, and fail with SQLite's busy timeout; and one that went
// ahead of the claims would let a runner working through a backlog keep
// them waiting until they failed.
//
// Its transaction may write the store's tables, as the outbox's runners
// do, which a handler's transaction may not (docs/semantics.md §7.2):
// never hand it to a handler.
func (s *Store) BeginTurn(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("sqlitestore: begin: lease (%v) must be positive", lease)
	}
	pass, err := s.writers.takeBackground(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: begin: no write turn: %w", err)
	}
	return s.beginKeyless(ctx, lease, pass)
}

// untilCtx is a wait for the write turn that only its context ends.
const untilCtx = time.Duration(math.MaxInt64)

// beginKeyless is Begin, holding the write turn that pass passes on when
// pass is not nil: the transaction passes it on when it ends or its lease
// runs out, whichever comes first, and when it fails to begin.
func (s *Store) beginKeyless(ctx context.Context, lease time.Duration, pass func()) (idemstore.Tx, error) {
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease)
	// Only BeginTurn's transactions hold the turn from their start, and
	// they are the process's own writers'.
	t := &storeTx{s: s, ctx: txCtx, cancel: cancel, own: pass != nil}
	if pass != nil {
		ended := context.AfterFunc(txCtx, pass)
		t.passTurn = func() {
			if ended() {
				pass()
			}
		}
	}
	stop := context.AfterFunc(ctx, cancel)
	err := s.begin(ctx, t)
	if !stop() && err == nil {
		// ctx ended while the transaction began; it is being rolled back.
		err = context.Cause(ctx)
	}
	if err != nil {
		if t.tx != nil {
			_ = t.tx.Rollback()
		}
		t.close()
		return nil, fmt.Errorf("sqlitestore: begin: %w", err)
	}
	t.handlerOwns.Store(true)
	return t, nil
}

// storeTx is the idemstore.Tx of sqlitestore: the *sql.Tx it ends itself, and
// the Tx it hands the handler.
type storeTx struct {
	s  *Store
	tx *sql.Tx
	h  *Tx
	// conn is the transaction's connection, with authorize registered on
	// it when authorized is set.
	conn        *sql.Conn
	authorized  bool
	handlerOwns atomic.Bool
	// own is set for a transaction of the process's own writers
	// (BeginTurn), which write the store's tables; a handler's never is.
	own bool
	// storeWrites is set while one of the store's own statements writes
	// the store's tables in the handler's transaction (ownExec), holding
	// the connection, so that no statement of the handler's is prepared
	// meanwhile.
	storeWrites atomic.Bool
	// madeTable is set once the authorizer has let the handler make a
	// table, whose foreign keys Commit looks at (referencesStore), and
	// madeTrigger once it has let it make a trigger of main's, make or
	// drop a table or a view, or drop an index or a trigger (remadeTable),
	// after which Commit looks at
	// what the triggers write (triggersWriteStore).
	madeTable, madeTrigger atomic.Bool
	// checking is set while Commit looks at what the handler made: the
	// authorizer refuses the store's tables' writes then too.
	checking atomic.Bool
	// rolledBack is set by the connection's rollback hook once the
	// transaction has been rolled back: by SQLite on its own, when a
	// statement in it was interrupted (its context ended) or failed for
	// want of memory, disk or a lock, by database/sql when the lease ran
	// out, or by the store.
	rolledBack atomic.Bool
	ctx        context.Context // the transaction's own context; done when its lease ran out
	cancel     context.CancelFunc
	// held is true when the transaction holds a claim (ClaimTx), false for
	// a keyless one (Begin).
	held  bool
	id    idemstore.Identity
	token string
	// passTurn passes on this process's write turn, which a held
	// transaction (ClaimTx) and one of BeginTurn keep until they end; nil
	// for one of Begin.
	passTurn func()
	// stopPastLease keeps rollBackPastLease from running, once the
	// transaction ends before its lease does.
	stopPastLease func() bool
}

// Driver implements idemstore.Tx; it returns the *Tx the handler writes with.
func (t *storeTx) Driver() any { return t.h }

// takeBack takes the transaction back from the handler, for Commit and
// Rollback to end it with the store's own statements on t.tx: once the
// handler's calls in flight are done, none of them runs in it any more
// (Tx.shut), and only then does the authorizer stop refusing what it
// refuses the handler. A call of a goroutine the handler left behind
// would otherwise pass unchecked, and commit with the completion or the
// release: a trigger on the store's table, or a write of a run whose
// claim is released for a retry to run again.
func (t *storeTx) takeBack() {
	t.h.shut()
	t.handlerOwns.Store(false)
}

// Commit implements idemstore.Tx.
func (t *storeTx) Commit(ctx context.Context, resp idemstore.Response) error {
	t.takeBack()
	defer t.close()
	if t.rolledBack.Load() && t.ctx.Err() == nil {
		return t.rolledBackUnder(ctx)
	}
	if err := t.checkMade(ctx); err != nil {
		return t.refused(ctx, err)
	}
	if t.held {
		if err := t.s.complete(ctx, t.tx, t.id, t.token, resp); err != nil {
			_ = t.tx.Rollback()
			return t.ended("commit", err)
		}
	}
	if err := t.tx.Commit(); err != nil {
		return t.ended("commit", err)
	}
	return nil
}

// rolledBackUnder ends a transaction that SQLite rolled back on its own
// while the handler held it, at its commit: nothing of it committed
// (commitHook), so the claim is released as the engine's answer, that the
// request was not processed, says, and the commit reports the rollback. A
// transaction rolled back because its lease ran out is not one: its claim
// is left to the lease's rule (ended).
func (t *storeTx) rolledBackUnder(ctx context.Context) error {
	_ = t.tx.Rollback() // database/sql's end of it; SQLite has none to end
	// The write turn goes on first: the release queues for it.
	t.close()
	err := errRolledBack
	if t.held {
		err = errors.Join(err, t.s.Release(ctx, t.id, t.token))
	}
	return t.ended("commit", err)
}

// errRolledBack is the error of a commit whose transaction SQLite rolled
// back on its own.
var errRolledBack = errors.New("SQLite rolled the transaction back when a statement in it failed or was interrupted; nothing of it committed")

// Rollback implements idemstore.Tx.
//
// SQLite may have rolled the transaction back already (rolledBack): then
// there is nothing to roll back, which is no failure, and the claim is
// released as usual.
//
// A held transaction in which the handler ran no statement holds nothing
// but the claim's check (holdClaim changes nothing) and SQLite's write
// lock: the claim is released inside it (releaseInside), so that the
// release does not queue for the lock again, behind every writer that came
// meanwhile. This is the release of a claim whose client left before its
// handler started (docs/semantics.md §7.3) and of a handler that answered
// without writing. Otherwise the handler's writes are rolled back and the
// claim released on its own.
func (t *storeTx) Rollback(ctx context.Context) error {
	t.takeBack()
	if t.held && !t.h.used.Load() && t.releaseInside(ctx) == nil {
		t.close()
		return nil
	}
	rolledBack := t.rolledBack.Load()
	rbErr := t.tx.Rollback()
	t.close()
	if errors.Is(rbErr, sql.ErrTxDone) || rolledBack {
		// Rolled back already, when the lease ran out or by SQLite.
		rbErr = nil
	}
	if rbErr != nil {
		rbErr = fmt.Errorf("sqlitestore: release: rollback: %w", rbErr)
	}
	if !t.held {
		return rbErr
	}
	return errors.Join(rbErr, t.s.Release(ctx, t.id, t.token))
}

// releaseInside deletes the claim in the held transaction and commits. When
// it fails the transaction is rolled back, or ended already, and Release
// goes the other way.
func (t *storeTx) releaseInside(ctx context.Context) error {
	if err := fenced(t.tx.ExecContext(ctx, release, t.id.Tenant, t.id.Scope, t.id.Key, t.token)); err != nil {
		return err
	}
	return t.tx.Commit()
}

// ended explains an error from a transaction. One that failed because its
// lease ran out has lost the claim as surely as a fenced one: a retry may
// already have taken the key over.
func (t *storeTx) ended(op string, err error) error {
	if errors.Is(err, idemstore.ErrFenced) {
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	if t.held && errors.Is(t.ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("sqlitestore: %s: the lease ran out and the transaction was rolled back (%v): %w", op, err, idemstore.ErrFenced)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// Tx is the transaction a transactional handler writes with (the Driver of
// sqlitestore's idemstore.Tx; reach it with idem.TxFrom[*sqlitestore.Tx]). It
// reads and writes like a *sql.Tx, but has no Commit or Rollback: the
// idempotency layer commits the handler's writes together with the key's
// completion, or rolls both back. A handler that committed on its own would
// make its effect durable without its key, so that a retry ran it again; a
// handler that rolled back would silently lose every write it made. To
// undo its writes, a handler answers with a status that is not stored (or
// panics).
//
// Each statement runs under the caller's context and, besides, ends when
// the transaction's lease does: a statement still running then is
// interrupted, as PostgreSQL's statement_timeout ends one, since it holds
// the database's only write lock. SQLite rolls the whole transaction back
// when a write in it is interrupted (or fails for want of memory or disk):
// every statement after that is refused, the request's claim is released
// with nothing of the transaction committed, and a commit fails.
//
// database/sql runs an argument's driver.Valuer inside the call, holding
// the transaction's connection, where the lease cannot end it: ExecContext,
// QueryContext and QueryRowContext convert their arguments before the call
// instead, to the values database/sql would make, so that a Value that
// hangs holds the handler alone. database/sql calls a sql.Scanner
// destination of Rows.Scan and Row.Scan holding the rows, which keep its
// rollback at the lease's end waiting: the store then rolls the
// transaction back on the connection itself. A statement the handler
// prepared is database/sql's own *sql.Stmt, whose arguments are converted
// inside its calls, holding the connection: a driver.Valuer argument of
// one that hangs holds the transaction and SQLite's write lock past the
// lease for as long (docs/semantics.md §5.2).
//
// Once the idempotency layer has taken the transaction back to end it,
// every call fails with an error that wraps sql.ErrTxDone, and the
// statements the handler prepared are closed: a call of a goroutine the
// handler left behind never runs beside the store's own statements that
// end the transaction, and is never committed with them.
type Tx struct {
	tx *sql.Tx
	// owner is the transaction's end, the store's side of it.
	owner *storeTx
	// lease is done when the transaction's lease has run out, or the
	// transaction has ended.
	lease context.Context
	// used is set once the handler has run, or prepared, a statement.
	used atomic.Bool
	// calls keeps the handler's calls apart from the transaction's end:
	// each call holds it shared from its check of ended to the driver's
	// return, and shut holds it exclusively to set ended.
	calls sync.RWMutex
	ended bool
	// mu guards ends and stmts. ends ends the contexts within made; end
	// runs them. stmts are the statements the handler prepared; shut
	// closes them.
	mu    sync.Mutex
	ends  []func()
	stmts []*sql.Stmt
}

// errTxEnded is the error of a handler's call made once the idempotency
// layer has taken the transaction back.
var errTxEnded = fmt.Errorf("sqlitestore: the idempotency layer has ended the handler's transaction: %w", sql.ErrTxDone)

// enter begins a handler's call: it returns the call's context (within),
// holding t.calls shared until the caller's leave, or errTxEnded once
// the transaction has been taken back (shut), holding nothing.
func (t *Tx) enter(ctx context.Context) (context.Context, error) {
	t.calls.RLock()
	if t.ended {
		t.calls.RUnlock()
		return nil, errTxEnded
	}
	return t.within(ctx), nil
}

// leave ends a call that entered.
func (t *Tx) leave() { t.calls.RUnlock() }

// shut takes the transaction back from the handler before the store's
// own statements end it: it waits for the handler's calls in flight,
// refuses every later one, and closes the statements the handler
// prepared (which waits for one running), so that nothing of the
// handler's runs in the transaction from then on, outside the checks
// that apply while the handler owns it. A second call does nothing.
func (t *Tx) shut() {
	t.calls.Lock()
	defer t.calls.Unlock()
	t.ended = true
	// The handler's statements close before its calls see ended: a
	// goroutine of the handler's that a refused call sets free must find
	// its prepared statements closed too, or it runs one in the
	// transaction the store is about to commit.
	t.mu.Lock()
	stmts := t.stmts
	t.stmts = nil
	t.mu.Unlock()
	for _, s := range stmts {
		_ = s.Close()
	}
}

// prepared keeps stmt, the handler's, for shut to close.
func (t *Tx) prepared(stmt *sql.Stmt) *sql.Stmt {
	t.mu.Lock()
	t.stmts = append(t.stmts, stmt)
	t.mu.Unlock()
	return stmt
}

// endedCtx is a context that is done with err (errTxEnded, or an
// argument's that driverArgs could not convert), for the calls that report
// an error only through what database/sql returns (a *sql.Row, a
// *sql.Stmt): database/sql checks a call's context before it takes the
// transaction's connection, and gives its error back.
type endedCtx struct {
	context.Context
	done chan struct{}
	err  error
}

func newEndedCtx(ctx context.Context, err error) endedCtx {
	c := endedCtx{Context: ctx, done: make(chan struct{}), err: err}
	close(c.done)
	return c
}

func (c endedCtx) Done() <-chan struct{} { return c.done }

func (c endedCtx) Err() error { return c.err }

// within is ctx, ended also when t's lease is: the statement run under it
// is interrupted then. The context lives until the transaction ends, as
// rows read under it must, and end ends it.
func (t *Tx) within(ctx context.Context) context.Context {
	t.used.Store(true)
	c, cancel := detached(ctx)
	stopLease := context.AfterFunc(t.lease, func() { cancel(context.Cause(t.lease)) })
	t.mu.Lock()
	t.ends = append(t.ends, func() {
		stopLease()
		cancel(context.Cause(t.lease))
	})
	t.mu.Unlock()
	return c
}

// detached returns a context with ctx's values and deadline that ends when
// ctx does or cancel is called, and reads ctx's Done channel and deadline
// only now, in the caller's goroutine. A handler may pass its framework's
// context (gin's *gin.Context), which the framework gives the next request
// once the handler returns; the context package watches a context of a
// type not its own from a goroutine that reads it whenever that goroutine
// runs, later too. detached's goroutine waits on the channel alone, and
// cancel stops it.
func detached(ctx context.Context) (c context.Context, cancel context.CancelCauseFunc) {
	done := ctx.Done()
	deadline, hasDeadline := ctx.Deadline()
	base, stopDeadline := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if hasDeadline {
		base, stopDeadline = context.WithDeadline(base, deadline)
	}
	c, end := context.WithCancelCause(base)
	ended := func() {
		// A deadline that passed ends c through base, as DeadlineExceeded.
		if !hasDeadline || time.Now().Before(deadline) {
			end(context.Canceled)
		}
	}
	quit := make(chan struct{})
	var stop sync.Once
	select {
	case <-done:
		ended()
	default:
		if done != nil {
			go func() {
				select {
				case <-done:
					ended()
				case <-quit:
				}
			}()
		}
	}
	return c, func(cause error) {
		stop.Do(func() { close(quit) })
		end(cause)
		stopDeadline()
	}
}

// end ends the contexts within made, in the caller's goroutine, once the
// transaction has ended: ending one reads the context it was made from,
// and a context a handler passed in may be its framework's to reuse once
// the handler returns (gin's *gin.Context is the next request's), so
// nothing of the transaction may read it later, from a goroutine of its
// own, as the lease's end would.
func (t *Tx) end() {
	t.shut()
	t.mu.Lock()
	ends := t.ends
	t.ends = nil
	t.mu.Unlock()
	for _, f := range ends {
		f()
	}
}

// ExecContext runs a statement that returns no rows inside the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	args, err := driverArgs(args)
	if err != nil {
		return nil, err
	}
	ctx, err = t.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer t.leave()
	return t.tx.ExecContext(ctx, query, args...)
}

// Exec is ExecContext with context.Background.
func (t *Tx) Exec(query string, args ...any) (sql.Result, error) {
	return t.ExecContext(context.Background(), query, args...)
}

// QueryContext runs a query inside the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	args, err := driverArgs(args)
	if err != nil {
		return nil, err
	}
	ctx, err = t.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer t.leave()
	return t.tx.QueryContext(ctx, query, args...)
}

// Query is QueryContext with context.Background.
func (t *Tx) Query(query string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(context.Background(), query, args...)
}

// QueryRowContext runs a query that returns at most one row inside the
// transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	args, err := driverArgs(args)
	if err != nil {
		return t.tx.QueryRowContext(newEndedCtx(ctx, err), query)
	}
	c, err := t.enter(ctx)
	if err != nil {
		return t.tx.QueryRowContext(newEndedCtx(ctx, err), query, args...)
	}
	defer t.leave()
	return t.tx.QueryRowContext(c, query, args...)
}

// QueryRow is QueryRowContext with context.Background.
func (t *Tx) QueryRow(query string, args ...any) *sql.Row {
	return t.QueryRowContext(context.Background(), query, args...)
}

// PrepareContext prepares a statement for use inside the transaction; it is
// closed when the transaction ends.
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	ctx, err := t.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer t.leave()
	stmt, err := t.tx.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return t.prepared(stmt), nil
}

// Prepare is PrepareContext with context.Background.
func (t *Tx) Prepare(query string) (*sql.Stmt, error) {
	return t.PrepareContext(context.Background(), query)
}

// StmtContext returns stmt, prepared on the database, as a statement that
// runs inside the transaction; it is closed when the transaction ends.
func (t *Tx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	c, err := t.enter(ctx)
	if err != nil {
		return t.tx.StmtContext(newEndedCtx(ctx, err), stmt)
	}
	defer t.leave()
	return t.prepared(t.tx.StmtContext(c, stmt))
}
