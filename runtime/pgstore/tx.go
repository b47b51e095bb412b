package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ErrTxOwned is returned by Commit and Rollback of the pgx.Tx a
// transactional handler receives: the idempotency layer ends that
// transaction itself, together with the key's completion or release. A
// handler that wants its writes undone returns a response that is not
// stored (or panics); nested transactions (Begin) commit and roll back
// normally.
var ErrTxOwned = errors.New("pgstore: the idempotency layer commits or rolls back this transaction")

// ErrCacheName is returned by Prepare of the pgx.Tx a transactional
// handler receives for a name that starts as the names of pgx's statement
// cache or pgstore's own statements do: a statement under such a name
// would stand in for one that pgx or pgstore prepared, on a connection
// later requests use.
var ErrCacheName = errors.New("pgstore: a prepared statement's name may not start with " + cachePrefix + " or " + ownPrefix + ", the prefixes of pgx's statement cache and pgstore's statements")

// ErrPreparedName is returned, wrapped, by Prepare of the pgx.Tx a
// transactional handler receives for a name that reads as SQL: one with
// whitespace in it, a statement that ends or begins a transaction
// (COMMIT, ROLLBACK, ...), or SELECT. pgx runs, in place of any query whose text is
// the name of a statement prepared on the connection, that statement; a
// name that is the text of a statement pgstore sends would have the
// handler's statement run in its place. pgx's statement cache already
// prepares each query once per connection, so a name is only needed for
// a statement run by name: give it a short one ("insert_order"), not its
// SQL (docs/runtime.md).
var ErrPreparedName = errors.New("pgstore: a prepared statement's name may not contain whitespace, be SELECT or a statement that ends or begins a transaction; pgx would run the statement in place of a query with that text")

// preparedNameRefused reports whether a handler may not prepare a
// statement under name (ErrPreparedName): every text pgstore sends has
// whitespace in it, ends a transaction, or is recacheSQL, the one word
// that recache has pgx prepare.
func preparedNameRefused(name string) bool {
	return strings.IndexFunc(name, unicode.IsSpace) >= 0 || endsTx(name) || name == recacheSQL
}

// ErrConnClosed is returned, wrapped, by the Release of a transaction
// whose connection closed before it ended, and by its Commit when the
// connection had closed before the commit could be sent, or the server
// ended the session before the commit ran: typically after a handler's
// statement whose context ended (a client that gave up), when pgx closes
// the connection under it, or when a session of the role (another
// request's handler) or an administrator ended the session with
// pg_terminate_backend (docs/semantics.md §7.2). Nothing of the transaction
// commits: PostgreSQL rolls it back as soon as it sees the session gone
// (at once for an idle session; for one still running a statement, when
// that statement ends, within the lease), and a claim's row and locks go
// with it, so the claim does not stay for its lease and a retry wins the
// key. Only a handler that ended the transaction itself and began another
// (COMMIT AND CHAIN) can have committed a claim's row first; that row
// stays in flight until its lease ends and then fails closed.
// It wraps idemstore.ErrClaimEnded, which the engine reads.
var ErrConnClosed = fmt.Errorf("pgstore: the transaction's connection closed before the transaction ended, so it was rolled back with its claim: %w", idemstore.ErrClaimEnded)

// ErrHandlerEndsTransaction is returned, wrapped, by a call of the pgx.Tx
// a transactional handler receives (Exec, Query, QueryRow, SendBatch,
// Prepare, a nested transaction's too) whose SQL has a statement that
// ends the transaction or begins one, or begins or ends a savepoint:
// COMMIT, END, ROLLBACK (ROLLBACK TO SAVEPOINT too), ABORT, PREPARE
// TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED, BEGIN, START
// TRANSACTION, SAVEPOINT or RELEASE [SAVEPOINT]. A handler's savepoints
// are its nested transactions (Begin), which pgstore opens and ends. Nothing of the call is sent, and
// the transaction is rolled back at its end whatever the handler answers:
// its Commit rolls back and returns this error (docs/semantics.md §5.4,
// §7.2).
var ErrHandlerEndsTransaction = errors.New("pgstore: a handler's statement may not end or begin a transaction or a savepoint; the idempotency layer ends the transaction, and a nested transaction (Begin) is a savepoint")

// refuseEnding returns an error wrapping ErrHandlerEndsTransaction, and
// marks the transaction to roll back, when sql ends or begins a
// transaction (endsTx); nil otherwise.
func (c *handlerCalls) refuseEnding(sql string) error {
	if !endsTx(sql) {
		return nil
	}
	c.refused.Store(true)
	return fmt.Errorf("%w: %.60q", ErrHandlerEndsTransaction, sql)
}

// cachePrefix starts the name of every statement pgx's statement cache
// prepares (driverNameSQL).
const cachePrefix = "stmtcache_"

// ClaimTx claims c inside a new transaction. A row that decides the claim
// by itself (a completed key, a conflict, a visible claim in flight) is
// read first, in one plain statement outside any transaction (peekSQL),
// and answers it: no transaction begins. Otherwise BEGIN, the lease-bound
// timeouts and the claim travel in one pipelined batch on the same pooled
// connection, a second round trip (the first use of a connection also
// prepares the statements, as pgx does for every query). A claim lost in
// the transaction costs one more, the COMMIT that keeps what the claim
// decided (an abandoned claim marked indeterminate) and returns the
// connection clean.
//
// The in-flight row is written inside the transaction and stays invisible to
// other sessions until Commit; the key's advisory lock, held until the
// transaction ends, makes concurrent claims answer "in flight" at once. If
// the process dies, PostgreSQL aborts the transaction: the row and the lock
// vanish and the client's next retry runs without waiting for the lease. A
// handler that hangs is ended by the database after c.Lease idle in the
// transaction (idle_in_transaction_session_timeout) or in one statement
// (statement_timeout).
func (s *Store) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	var tx idemstore.Tx
	res, err := againIfGone(func() (res idemstore.Result, err error) {
		res, tx, err = s.claimTx(ctx, c)
		return res, err
	})
	return res, tx, err
}

func (s *Store) claimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	if err := c.Check(); err != nil {
		return idemstore.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	if s.unusable != nil {
		return idemstore.Result{}, nil, s.unusable
	}
	conn, err := s.acquire(ctx)
	if err != nil {
		return idemstore.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	if res, decided, err := peek(ctx, conn, c); err != nil || decided {
		conn.Release()
		if err != nil {
			return idemstore.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
		}
		return res, nil, nil
	}
	// Where pgstore has not yet had the session compile idempotency_claim,
	// the claim does, by pgstore's call, before any handler's: the
	// function's version is read ahead of it in the same round trip
	// (compiled.go).
	compiled := markedClaim(conn.Conn())
	var read *claimRead
	if compiled == nil {
		read = &claimRead{}
	}
	// The key's guard is asked for on the guard's connection while the
	// claim travels on this one.
	guard := s.guard.lock(c.Identity)
	b := leasedBegin(c.Lease, c.Token, requestBadge(c), read != nil)
	b.Queue(txClaimSQL, claimArgs(c, true)[:9]...)
	br := conn.SendBatch(ctx, b)
	began, mark, err := begun(br, c.Token, true, read)
	var (
		res     idemstore.Result
		outcome string
	)
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			res, outcome, err = readTxClaim(rows, c)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && read != nil {
		compiled = read.compiled(conn.Conn())
	}
	if err == nil && outcome == outcomeBusyElse {
		// Inside the claim's transaction, which still holds this
		// request's lock: no copy of the request can take the key's
		// meanwhile and be taken for another request.
		res, err = settle(ctx, conn, c)
	}
	if err != nil {
		// The claim may have been won before the error: its session locks
		// must not stay on a pooled connection.
		s.giveBack(ctx, conn, nil)
		guard.releaseLater()
		return idemstore.Result{}, nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	if !res.Won {
		// A lost claim may still have changed the row: under fail-closed
		// it marks an abandoned claim indeterminate. That must stand, as it
		// does for a plain Claim, so the transaction commits. A lost claim
		// needs no guard.
		guard.releaseLater()
		var reap *idemstore.Claim
		if held(outcome) {
			reap = &c
		}
		s.commitLost(ctx, conn, reap)
		return res, nil, nil
	}
	if gerr := s.guard.await(ctx, &guard); gerr != nil {
		// The key's row is this claim's, but its guard is not: another
		// request holds the key, one whose handler let go of the key's
		// own locks, or the guard could not be asked. The claim is given
		// back, never run unguarded.
		s.giveBack(ctx, conn, newHandlerTx(br.Tx(), nil))
		guard.releaseLater()
		if errors.Is(gerr, errGuardBusy) {
			return busyResult(c), nil, nil
		}
		return idemstore.Result{}, nil, fmt.Errorf("pgstore: claim: %w", gerr)
	}
	h := newHandlerTx(br.Tx(), s.handlerCache(began))
	h.compiled = compiled
	h.staging = &staging{id: c.Identity, rel: mark.rels[2]}
	mark.staged = &h.staging.n
	return res, &tx{s: s, conn: conn, h: h, mark: mark, claim: &c, guard: guard}, nil
}

// peek reads the row that decides c by itself (peekSQL), outside any
// transaction: decided reports whether there is one, and res is then the
// answer. Such a claim needs nothing of the transactional claim, which
// would only read the same row and commit a transaction that did nothing.
func peek(ctx context.Context, conn *pgxpool.Conn, c idemstore.Claim) (res idemstore.Result, decided bool, err error) {
	rows, err := conn.Query(ctx, peekSQL, c.Tenant, c.Scope, c.Key)
	if err != nil {
		return idemstore.Result{}, false, err
	}
	return readPeek(rows, c)
}

// Begin starts a plain READ COMMITTED transaction for a transactional
// operation that runs without a key. Its Commit commits; its Rollback rolls
// back. The lease bounds it as it bounds ClaimTx's (txTimeoutsSQL, sent in
// the same round trip as BEGIN): PostgreSQL ends a session that sits idle
// in the transaction, or runs one statement, for longer.
func (s *Store) Begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	return againIfGone(func() (idemstore.Tx, error) { return s.begin(ctx, lease) })
}

func (s *Store) begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	if s.unusable != nil {
		return nil, s.unusable
	}
	if lease < time.Microsecond {
		return nil, fmt.Errorf("pgstore: begin: lease (%v) must be at least 1µs", lease)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	compiled := compileClaim(ctx, conn.Conn())
	value := newMark()
	br := conn.SendBatch(ctx, leasedBegin(lease, value, nil, false))
	began, mark, err := begun(br, value, false, nil)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.giveBack(ctx, conn, nil)
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	// A keyless transaction writes no key, but what it leaves on the
	// store's table (a trigger, a rule) would act on every key after it:
	// its end is checked as a keyed one's.
	h := newHandlerTx(br.Tx(), s.handlerCache(began))
	h.compiled = compiled
	return &tx{s: s, conn: conn, h: h, mark: mark}, nil
}

// leasedBegin is a batch that begins a transaction bounded by lease (its
// statement and idle timeouts), marked with mark (see sameTxSQL) and
// wearing badge, a claim's request badge (requestBadge), and its lease
// (reapSQL), or nil for a keyless transaction, for more statements to be
// queued behind in the same round trip; readClaim has it read
// idempotency_claim's version for a claim queued behind (compiled.go).
// Batch.BeginTx still yields a pgx.Tx for the handler.
// READ COMMITTED whatever the database's default: a claim needs a fresh
// snapshot per statement.
func leasedBegin(lease time.Duration, mark string, badge any, readClaim bool) *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	var class, leaseLock any
	if badge != nil {
		class, leaseLock = badgeClass, -leaseMillis(lease)
	}
	b.Queue(txTimeoutsSQL, timeoutSetting(lease), mark, class, badge, leaseLock, readClaim)
	return b
}

// newMark returns a mark for a keyless transaction, as unguessable as a
// claim's lease token, which marks a claimed one.
func newMark() string { return rand.Text() }

// begun reads the results of leasedBegin's two statements from br: when
// the transaction began, by the database's clock, and the mark that its
// end is checked against (txMark), with value and, when claimed, the
// claim's write that follows leasedBegin in the batch; and, into read
// when not nil, idempotency_claim's oid and version (compiled.go).
func begun(br pgx.BatchResults, value string, claimed bool, read *claimRead) (began time.Time, mark txMark, err error) {
	if _, err = br.Exec(); err != nil {
		return began, mark, err
	}
	mark.value = value
	var oid, version any // nil skips the column
	if read != nil {
		oid, version = &read.oid, &read.version
	}
	if err = br.QueryRow().Scan(nil, nil, nil, nil, nil, &began, &mark.rels, &mark.writes, oid, version); err != nil {
		return began, mark, err
	}
	if len(mark.writes) != 4 {
		return began, mark, fmt.Errorf("%d counts of the transaction's writes, not 4", len(mark.writes))
	}
	mark.began = began
	if claimed {
		// A won claim inserts its key's row, or updates an expired one.
		mark.writes[0]++
	}
	return began, mark, nil
}

// txMark is what sameTxSQL checks at a transaction's end: value, the
// transaction's mark; rels, the relations that the names of the store's
// tables resolved to when the transaction began, before the handler ran
// (watchedSQL); and writes, what the transaction may have written to them
// by its end (txWritesSQL), pgstore's own writes and nothing else. A
// handler that makes a name resolve elsewhere (a temporary table of that
// name, which the session's search_path finds first, or a search_path of
// its own) would have the completion, and every statement after it on the
// session, write a relation of its making instead of the key's row; one
// that writes another key's row, a phase, or an outbox row would undo what
// another request stored (docs/semantics.md §7.2). began is when the
// transaction began, by the database's clock: the handler can read the
// mark and set it again in a transaction it began itself, but not that
// transaction's beginning, which pgstore holds here, out of its reach.
// The zero txMark is checked by nothing: completeTxSQL makes the check
// itself. staged counts the effects a keyed transaction's handler staged
// (StageEffect), which its end expects too; nil for a keyless one, which
// stages none.
type txMark struct {
	value  string
	rels   []uint32
	writes []int64
	began  time.Time
	staged *atomic.Int64
}

// checkArgs are sameTxCheckSQL's arguments, $1 to $4.
func (m txMark) checkArgs() []any {
	writes := m.writes
	if m.staged != nil {
		writes = append([]int64(nil), m.writes...)
		writes[0] += m.staged.Load()
	}
	return []any{m.value, m.rels, writes, m.began}
}

// timeoutSetting renders a lease as a PostgreSQL timeout in whole
// milliseconds, rounded up: 0 would switch the timeout off. PostgreSQL
// keeps the timeout in an int32 and refuses a larger one, so a longer
// lease (about 24.8 days) is bounded by the longest timeout it takes.
func timeoutSetting(lease time.Duration) string {
	return strconv.FormatInt(int64(leaseMillis(lease)), 10)
}

// leaseMillis is a lease in whole milliseconds as timeoutSetting renders
// it: at least 1, at most math.MaxInt32.
func leaseMillis(lease time.Duration) int32 {
	const longest = math.MaxInt32 * time.Millisecond
	ms := (min(lease, longest) + time.Millisecond - 1) / time.Millisecond
	return int32(max(ms, 1))
}

// cleanupTimeout bounds each statement that gives a connection back clean.
const cleanupTimeout = 5 * time.Second

// commitLost ends the transaction of a lost claim with COMMIT and returns
// its connection; a connection that cannot commit is closed, which rolls
// the change back (the next claim then makes it again). When reap is not
// nil, the claim of reap met its key's locks held, and reapSQL follows
// the COMMIT in the same round trip; its failure is logged, and the
// connection kept.
func (s *Store) commitLost(ctx context.Context, conn *pgxpool.Conn, reap *idemstore.Claim) {
	pc := conn.Conn()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if !pc.IsClosed() && pc.PgConn().TxStatus() != 'I' {
		var err, reapErr error
		if reap == nil {
			err = execPlain(rctx, pc, commitSQL)
		} else {
			b := &pgconn.Batch{}
			b.ExecParams(commitSQL, nil, nil, nil, nil)
			values, oids := reapArgs(*reap)
			b.ExecParams(reapSQL, values, oids, nil, nil)
			sent := readBatch(pc.PgConn().ExecBatch(rctx, b))
			if _, err = sent.at(0); err == nil {
				res, rerr := sent.at(1)
				if reapErr = rerr; res != nil {
					reapErr = s.reaped(ctx, res)
				}
			}
		}
		switch {
		case err != nil:
			s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: committing a lost claim failed; closing its connection", slog.Any("err", err))
			_ = pc.Close(rctx)
		case reapErr != nil:
			s.logger.LogAttrs(ctx, slog.LevelWarn, reapFailed, slog.Any("err", reapErr))
		}
	}
	conn.Release()
}

// giveBack rolls back whatever transaction conn still has open, gives the
// session back as the pool handed it out (resetSQL: a won claim's session
// locks, whatever a handler set), and returns conn to the pool, in one
// round trip. It runs even when ctx is already cancelled. Should a
// statement fail, the connection is closed: PostgreSQL then aborts the
// transaction and drops the locks with it, and the pool never hands out a
// connection that still holds them. h is the transaction a handler wrote
// through, or nil; it is closed before conn goes back (putBack).
func (s *Store) giveBack(ctx context.Context, conn *pgxpool.Conn, h *handlerTx) {
	pc := conn.Conn()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if !pc.IsClosed() {
		// A handler's session may have had the statements it ran parsed
		// anew under its settings (discardPlansSQL).
		if err := sendReset(rctx, pc, pc.PgConn().TxStatus() != 'I', h != nil && !h.cache.describes); err != nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: cleaning up a connection failed; closing it", slog.Any("err", err))
			_ = pc.Close(rctx)
		}
	}
	s.putBack(ctx, conn, h, nil)
}

// newSeed returns a seed for setseed, in [-1, 1), that no handler can
// predict.
func newSeed() float64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return float64(binary.LittleEndian.Uint64(b[:])>>11)/(1<<53)*2 - 1
}

// sendEnding sends the statements that end the transaction marked with
// mark, behind sameTxSQL and followed by sessionCheckSQL, leanResetSQL and
// replacedSQL, in one round trip of pgstore's own messages (wire.go); when
// sessionCheckSQL finds that the handler left more on the session, or
// that prepared statements were made to parse again while it ran, a
// second round trip sends resetSQL (with discardPlansSQL). When commit is
// set, the transaction commits: stmts are followed by COMMIT, and the
// work that PostgreSQL would otherwise run inside the COMMIT itself, after
// every check, is done before the check or made unable to write
// (closeCursorsSQL), after a savepoint the handler left open is released
// (releaseOuterSQL). It
// returns the command tag of the last statement before the session's
// check (the COMMIT, or the last of stmts), err when one of them failed
// (the reset then never ran), and resetErr when only the reset failed or
// found the session unfit to reuse (errStatementReplaced). err wraps
// errHandlerEndedTx when the connection is in another transaction than
// the marked one; nothing of stmts ran then.
//
// A transaction in which a statement failed runs nothing but its end, so
// it cannot be checked: sameTxSQL and the guard are left out, and a
// caller that must know learns it otherwise (Release). sameTxSQL is left
// out too when mark's value is empty: the first of stmts checks the mark
// itself (completeTxSQL).
func sendEnding(ctx context.Context, conn *pgxpool.Conn, mark txMark, h *handlerTx, commit bool, stmts ...*pgx.QueuedQuery) (tag pgconn.CommandTag, err, resetErr error) {
	pc := conn.Conn()
	if pc.IsClosed() {
		return tag, errNotSent, nil
	}
	failed := txFailed(conn)
	guarded := commit && !failed
	var qs []*pgx.QueuedQuery
	if guarded && h.savepoints.anyOpen() {
		// What follows must run at the transaction's top level
		// (savepoint.go).
		qs = append(qs, &pgx.QueuedQuery{SQL: releaseOuterSQL})
	}
	if guarded {
		qs = append(qs, &pgx.QueuedQuery{SQL: closeCursorsSQL}, &pgx.QueuedQuery{SQL: fireDeferredSQL})
	}
	check := -1
	if mark.value != "" && !failed {
		check = len(qs)
		qs = append(qs, &pgx.QueuedQuery{SQL: sameTxSQL, Arguments: mark.checkArgs()})
	}
	qs = append(qs, stmts...)
	if guarded {
		qs = append(qs, &pgx.QueuedQuery{SQL: readOnlySQL})
	}
	if commit {
		qs = append(qs, &pgx.QueuedQuery{SQL: commitSQL})
	}
	ending := len(qs)
	qs = append(qs, leanReset(pc.Config().User, h.cache.began, h.compiled.oid())...)
	sent, err := sendOwn(ctx, pc, qs)
	if err != nil {
		// Nothing of qs ran: what failed was sent before it (a statement's
		// preparation).
		return tag, endNotRun(pc, err), nil
	}
	commitAt := ending
	if commit {
		commitAt--
	}
	for i := range ending {
		var res *pgconn.Result
		if res, err = sent.at(i); i == check && isNotSameTx(err) {
			err = fmt.Errorf("%w: %w", errHandlerEndedTx, err)
		}
		if err != nil {
			if i < commitAt && isFatal(err) {
				// The server ended the session before the COMMIT: it
				// never ran.
				err = endNotRun(pc, err)
			}
			return tag, err, nil
		}
		tag = res.CommandTag
	}
	i := ending
	left, resetErr := sent.boolAt(i, 2)
	if resetErr == nil {
		var version []byte
		if version, resetErr = sent.valueAt(i, 5); resetErr == nil {
			h.compiled.checked(version)
		}
	}
	if resetErr == nil {
		var list []byte
		if list, resetErr = sent.valueAt(i, 3); resetErr == nil {
			resetErr = h.cache.found(list)
		}
	}
	for j := i + 1; resetErr == nil && j < i+1+len(leanResetSQL); j++ {
		_, resetErr = sent.at(j)
	}
	// A pool that describes parses every statement where it runs, the
	// check too: it keeps no parse of the handler's session.
	var replaced, replanned bool
	if resetErr == nil && !h.cache.describes {
		replanned, resetErr = sent.boolAt(i, 4)
	}
	if resetErr == nil {
		replaced, resetErr = sent.boolAt(i+1+len(leanResetSQL), 0)
	}
	switch {
	case resetErr == nil && replaced:
		resetErr = errStatementReplaced
	case resetErr == nil && (left || replanned):
		resetErr = sendReset(ctx, pc, false, replanned)
	}
	if resetErr != nil {
		resetErr = fmt.Errorf("resetting the session: %w", resetErr)
	}
	return tag, nil, resetErr
}

// leanReset is sessionCheckSQL, for a connection of user whose handler's
// transaction began at began and whose compiled claim is the function
// claim (compiledClaim.oid), and leanResetSQL.
func leanReset(user string, began time.Time, claim uint32) []*pgx.QueuedQuery {
	qs := []*pgx.QueuedQuery{{SQL: sessionCheckSQL, Arguments: []any{user, newSeed(), began, claim}}}
	for _, q := range leanResetSQL {
		qs = append(qs, &pgx.QueuedQuery{SQL: q})
	}
	return qs
}

// putBack returns conn to the pool once its transaction has ended and its
// session has been reset; resetErr, when not nil, is why the session may
// not be reused (its reset failed, or errSessionDiscarded), and the
// connection is closed instead. h is the transaction a handler wrote
// through, nil if none. Before conn goes back, pgx forgets the statements
// the handler prepared by name (preparedNames), and pgx's transaction
// object is marked closed: the engine ends that transaction with
// statements of its own, so pgx would otherwise still take it for open,
// and whatever reads that state would keep working on a pooled connection
// (pgx's LargeObjects, were they not run through h: throughHandler). Its Commit gets a context that is already done, so
// pgx sends nothing: it only marks the object closed, and closes the
// connection only if it is still inside a transaction, which a connection
// that gets here is not unless its cleanup failed (then it is closed
// anyway). A connection on which a call of the handler's was still in
// flight when the transaction ended is closed, never pooled (inflight.go),
// and nothing more is done with it: pgx.Conn is not safe for use by two
// goroutines.
func (s *Store) putBack(ctx context.Context, conn *pgxpool.Conn, h *handlerTx, resetErr error) {
	pc := conn.Conn()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	outlived := false
	if h != nil {
		h.close()
		outlived = h.calls.outlived
	}
	if outlived {
		s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: a call of the handler's was still running when its transaction ended; closing its connection")
		resetErr = errSessionDiscarded
	}
	if h != nil && h.compiled != nil && !h.compiled.intact && resetErr == nil {
		resetErr = errClaimUnverified
	}
	if h != nil && resetErr == nil && !pc.IsClosed() {
		// The reset dropped the statements already; Deallocate of one that
		// is gone only tells pgx, at one round trip each, which only a
		// handler that prepares by name pays.
		for _, name := range h.prepared.take() {
			if resetErr = pc.Deallocate(rctx, name); resetErr != nil {
				resetErr = fmt.Errorf("forgetting the handler's prepared statement %q: %w", name, resetErr)
				break
			}
		}
		if resetErr == nil {
			resetErr = refreshCached(rctx, pc, h)
		}
	}
	if resetErr != nil && !pc.IsClosed() {
		if !errors.Is(resetErr, errSessionDiscarded) {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: resetting a connection failed; closing it", slog.Any("err", resetErr))
		}
		_ = pc.Close(rctx)
	}
	if h != nil && !outlived {
		done, cancelDone := context.WithCancel(context.Background())
		cancelDone()
		_ = h.tx.Commit(done)
	}
	conn.Release()
}

// errNotSent is sendEnding's error on a connection that had closed before
// anything was sent.
var errNotSent = errors.New("the connection had closed; nothing was sent")

// errEndNotRun is sendEnding's error on a connection that closed before
// the statements that end the transaction ran: the server ended the
// session (pg_terminate_backend, an administrator's or another session's
// of the role, or a timeout) before them, while pgstore prepared them or
// ran the first of them.
var errEndNotRun = errors.New("the session ended before the transaction's end ran")

// endNotRun returns err, the failure of statements of a transaction's end
// that never ran, wrapped in errEndNotRun when pc has closed, so that no
// caller takes them for a COMMIT whose answer was lost.
func endNotRun(pc *pgx.Conn, err error) error {
	if !pc.IsClosed() {
		return err
	}
	return fmt.Errorf("%w: %w", errEndNotRun, err)
}

// isFatal reports whether err is the server's report that it ended the
// session (severity FATAL or PANIC), after which it runs nothing more.
func isFatal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC")
}

// closedUnsent reports whether err is the failure of statements that never
// ran because conn had closed, before they were sent (errNotSent) or
// before they ran (errEndNotRun): ErrConnClosed.
func closedUnsent(conn *pgxpool.Conn, err error) bool {
	return conn.Conn().IsClosed() && (errors.Is(err, errNotSent) || errors.Is(err, errEndNotRun))
}

// isNotSameTx reports the error of sameTxSQL in a transaction pgstore did
// not begin.
func isNotSameTx(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateNotSameTx
}

// isLeaseTimeout reports the error of a session that
// idle_in_transaction_session_timeout (SQLSTATE 25P03) ended.
func isLeaseTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P03"
}

// tx is the idemstore.Tx of pgstore.
type tx struct {
	s    *Store
	conn *pgxpool.Conn // nil once the transaction has ended
	h    *handlerTx
	// mark is the transaction's mark (sameTxSQL): the claim's lease token,
	// or a random one for a keyless transaction, with the relation of the
	// store's table.
	mark txMark
	// claim is the won claim the transaction holds, with its session
	// locks; nil for a keyless transaction (Begin).
	claim *idemstore.Claim
	// guard is the claim's guard (guard.go), let go once the key is
	// settled; nil for a keyless transaction.
	guard *guardTicket
}

var errTxEnded = errors.New("pgstore: transaction already ended")

// Driver returns the pgx.Tx the handler writes with.
func (t *tx) Driver() any { return pgx.Tx(t.h) }

// Commit writes resp as the key's completion and commits, in one round
// trip: the completion (completeTxSQL, which also checks that the
// transaction is still the claim's), COMMIT and the release of the claim's
// session locks are pipelined in one batch. When the token is no longer
// current the completion raises, the transaction aborts, the COMMIT is never executed,
// everything is rolled back and Commit returns idemstore.ErrFenced.
//
// A handler that ended the transaction itself (a raw COMMIT or ROLLBACK
// through Exec or Conn, whether or not it began another in the same
// statement) has written outside it: its effects may or may not have
// committed. Commit then writes no completion, leaves the key
// indeterminate, closes the session and returns an error wrapping
// idemstore.ErrOutcomeUnknown; so does the Commit of a keyless transaction
// (Begin) that the handler ended. The handler's statements that would end
// the transaction are refused before they are sent
// (ErrHandlerEndsTransaction); after one, Commit rolls back, as Rollback
// does, and returns an error wrapping ErrHandlerEndsTransaction.
func (t *tx) Commit(ctx context.Context, resp idemstore.Response) error {
	if t.conn != nil && t.h.calls.refused.Load() {
		// A statement of the handler's that would have ended the
		// transaction was refused: the handler failed, and nothing of
		// its transaction commits.
		return errors.Join(fmt.Errorf("pgstore: commit: the transaction was rolled back: %w", ErrHandlerEndsTransaction), t.Rollback(ctx))
	}
	conn, err := t.end()
	if err != nil {
		return err
	}
	if t.claim == nil {
		return t.commitKeyless(ctx, conn)
	}
	defer t.guard.release()
	c := t.claim
	switch {
	case t.h.calls.outlived:
		return t.settle(ctx, conn, errCallOutlived)
	case handlerEnded(conn):
		return t.settle(ctx, conn, errHandlerEndedTx)
	}
	// The completion checks the mark (the claim's token) itself.
	tag, err, resetErr := sendEnding(ctx, conn, txMark{}, t.h, true,
		&pgx.QueuedQuery{SQL: completeTxSQL, Arguments: completeTxArgs(t.mark, c.Identity, resp)})
	switch {
	case errors.Is(err, errHandlerEndedTx):
		return t.settle(ctx, conn, errHandlerEndedTx)
	case err == nil && tag.String() == "COMMIT":
		// Committed: a reset that failed after it costs the connection,
		// not the request.
		t.s.putBack(ctx, conn, t.h, resetErr)
		return nil
	case err == nil:
		// COMMIT of a transaction in which a statement failed (the handler
		// carried on after an error) answers ROLLBACK rather than an error.
		return t.settle(ctx, conn, fmt.Errorf("pgstore: commit: the transaction was rolled back (%s): a statement in it failed", tag))
	case isLeaseTimeout(err):
		// The handler sat idle past its lease and PostgreSQL ended the
		// session: its writes, its claim and its locks are gone, and the key
		// may already belong to a retry. That is a fenced completion.
		t.s.giveBack(ctx, conn, t.h)
		return fmt.Errorf("%w: the database ended the transaction when the lease ran out: %w", idemstore.ErrFenced, err)
	case isFenced(err), isNotSameTx(err):
		// While this transaction holds the key's locks no claim can take
		// the key over, so a claim row that is not current any more was
		// ended by the handler: a raw ROLLBACK, then a new transaction.
		// So was a transaction without the claim's mark.
		return t.settle(ctx, conn, errHandlerEndedTx)
	case conn.Conn().IsClosed():
		return t.commitCut(ctx, conn, err)
	default:
		return t.settle(ctx, conn, fmt.Errorf("pgstore: commit: %w", err))
	}
}

// commitCut ends a transaction whose connection closed under its commit
// (err). When nothing of the commit ran (closedUnsent: it was not sent,
// or the server ended the session before it), nothing of the
// transaction committed (ErrConnClosed). Otherwise the commit may have
// reached the server and committed, the handler's writes and a claim's
// completion together, or not, which cannot be known here. A claim's key
// tells it (docs/semantics.md §3.6): its retry meets the completed row, or
// wins the key once PostgreSQL has rolled the transaction back, so the
// error is a failed commit's. A keyless transaction has no key to tell it,
// and a retry could repeat writes that stand: idemstore.ErrOutcomeUnknown.
// Nothing can be settled on a closed session, nor needs to be: what
// commits, commits whole.
func (t *tx) commitCut(ctx context.Context, conn *pgxpool.Conn, err error) error {
	unsent := closedUnsent(conn, err)
	t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
	switch {
	case unsent:
		return fmt.Errorf("pgstore: commit: %w: %w", ErrConnClosed, err)
	case t.claim == nil:
		return fmt.Errorf("pgstore: commit: the connection closed before the commit's answer came: %w: %w", idemstore.ErrOutcomeUnknown, err)
	}
	return fmt.Errorf("pgstore: commit: the connection closed before the commit's answer came; the key's row tells whether it committed: %w", err)
}

// completeTxArgs are completeTxSQL's arguments for the completion of id
// with resp in the transaction marked with mark, whose value is the
// claim's token.
func completeTxArgs(mark txMark, id idemstore.Identity, resp idemstore.Response) []any {
	args := completeArgs(id, mark.value, resp)
	return append(mark.checkArgs(), append(args[:3], args[4:]...)...)
}

// Types of markKey's statements' parameters.
var (
	markCommittedTypes = []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID}
	failClosedTxTypes  = []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.ByteaOID, pgtype.Int8OID}
)

// markKey makes sure, on pc, that no takeover can repeat what the handler
// of claim c may have committed on its own: when the handler ended the
// transaction (ended) the key becomes indeterminate whatever its row
// became; otherwise a claim row still in flight under the token was
// committed by the handler, and is marked indeterminate. It reports
// whether the key is left indeterminate. The statements are parsed afresh
// and sent as pgstore's own messages (execDirect), neither taken from
// pgx's statement cache, whose statements the handler may have
// deallocated (DEALLOCATE ALL, DISCARD ALL), nor looked up by pgx among
// the statements the handler prepared by name.
func markKey(ctx context.Context, pc *pgx.Conn, c *idemstore.Claim, ended bool) (unknown bool, err error) {
	if ended {
		return true, execDirect(ctx, pc, failClosedTxSQL, failClosedTxTypes, c.Tenant, c.Scope, c.Key, c.Token,
			c.Operation, fingerprintArg(c.Fingerprint), c.TTL.Microseconds()).Err
	}
	res := execDirect(ctx, pc, markCommittedSQL, markCommittedTypes, c.Tenant, c.Scope, c.Key, c.Token)
	return res.CommandTag.RowsAffected() > 0, res.Err
}

// markKeyOnPool is markKey on a connection of pool.
func markKeyOnPool(ctx context.Context, pool *pgxpool.Pool, c *idemstore.Claim, ended bool) (unknown bool, err error) {
	err = pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		unknown, err = markKey(ctx, conn.Conn(), c, ended)
		return err
	})
	return unknown, err
}

// errSessionDiscarded is why settle closes a session instead of
// resetting it for the pool.
var errSessionDiscarded = errors.New("the transaction did not commit as it should; its session is not reused")

// handlerEnded reports whether the handler ended the transaction on conn
// itself (a raw COMMIT or ROLLBACK): the connection that pgstore left in a
// transaction is idle. A handler that began another transaction at once is
// found by sendEnding instead.
func handlerEnded(conn *pgxpool.Conn) bool {
	return conn.Conn().PgConn().TxStatus() == 'I'
}

// txFailed reports whether a statement failed in the transaction on conn:
// until it ends, the transaction refuses every other statement.
func txFailed(conn *pgxpool.Conn) bool {
	return conn.Conn().PgConn().TxStatus() == 'E'
}

// errHandlerEndedTx is why settle fails a key closed.
var errHandlerEndedTx = errors.New("the handler ended the transaction itself (a raw COMMIT or ROLLBACK, perhaps beginning another)")

// settle ends a keyed transaction whose commit did not go through. It rolls
// back what is left of it and then, while the claim's session locks still
// keep every other claim away from the key, makes sure that no takeover can
// repeat what the handler may have committed on its own: when the handler
// ended the transaction (cause is errHandlerEndedTx) the key becomes
// indeterminate whatever its row became; otherwise a claim row that is still
// in flight under the token can only have been committed by the handler,
// and is marked indeterminate. Only then are the locks released, by closing
// the session: a handler that ended its transaction may have changed its
// session in any way, so it never goes back to the pool. It returns
// an error wrapping idemstore.ErrOutcomeUnknown in both cases, cause otherwise.
func (t *tx) settle(ctx context.Context, conn *pgxpool.Conn, cause error) error {
	c := t.claim
	pc := conn.Conn()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	ended := errors.Is(cause, errHandlerEndedTx)
	unknown := ended
	var err error
	released := false
	switch {
	case pc.IsClosed():
		// The session is gone (cutOff), and its locks with it: the key is
		// marked from a connection of the pool, which may first need this
		// one's place. failClosedTxSQL waits for the transaction to have
		// ended, should the server not have rolled it back yet.
		t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
		released = true
		err = errNotSent
	case pc.PgConn().TxStatus() != 'I':
		err = execPlain(rctx, pc, rollbackSQL)
	}
	if err == nil {
		err = execPlain(rctx, pc, settleSessionSQL)
	}
	if err == nil {
		unknown, err = markKey(rctx, pc, c, ended)
	}
	if err != nil {
		// The handler's session would not take the mark (a setting the
		// reset does not undo, a broken session): the key is marked from
		// a connection of the pool instead, while this session's locks
		// still keep every other claim away from it.
		var poolErr error
		if unknown, poolErr = markKeyOnPool(rctx, t.s.pool, c, ended); poolErr == nil {
			err = nil
		} else {
			err = errors.Join(err, poolErr)
		}
	}
	// Whatever the handler did to its session, the session does not go
	// back to the pool: closing it also drops the claim's session locks.
	if !released {
		t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
	}
	if err != nil {
		// The key could not be marked: its claim row, if the handler
		// committed one, stays in flight, and fails closed after its lease
		// whatever the policy's onLeaseExpiry (a held claim's row records
		// so, see idempotency_claim).
		t.s.logger.LogAttrs(ctx, slog.LevelError, "pgstore: a transaction the handler may have ended could not be settled",
			slog.Any("cause", cause), slog.Any("err", err))
		return fmt.Errorf("pgstore: commit: %w; settling it: %w", cause, err)
	}
	if unknown {
		return fmt.Errorf("pgstore: commit: %w: %w", cause, idemstore.ErrOutcomeUnknown)
	}
	return cause
}

// commitKeyless commits a transaction that holds no claim (Begin), and
// resets the session in the same round trip. A handler that ended the
// transaction itself has no key to leave indeterminate, but its writes are
// as unknown as a keyed handler's: Commit reports idemstore.ErrOutcomeUnknown
// rather than a commit, and the session is closed, not pooled.
func (t *tx) commitKeyless(ctx context.Context, conn *pgxpool.Conn) error {
	switch {
	case t.h.calls.outlived:
		return t.endedKeyless(ctx, conn, "commit", errCallOutlived)
	case handlerEnded(conn):
		return t.endedKeyless(ctx, conn, "commit", errHandlerEndedTx)
	}
	tag, err, resetErr := sendEnding(ctx, conn, t.mark, t.h, true)
	switch {
	case errors.Is(err, errHandlerEndedTx):
		return t.endedKeyless(ctx, conn, "commit", errHandlerEndedTx)
	case err != nil && conn.Conn().IsClosed():
		return t.commitCut(ctx, conn, err)
	case err != nil:
		t.giveBackAfter(ctx, conn, err)
		return fmt.Errorf("pgstore: commit: %w", err)
	case tag.String() != "COMMIT":
		t.s.giveBack(ctx, conn, t.h)
		return fmt.Errorf("pgstore: commit: the transaction was rolled back (%s): a statement in it failed", tag)
	}
	t.s.putBack(ctx, conn, t.h, resetErr)
	return nil
}

// endedKeyless ends a keyless transaction that its handler ended itself,
// or may have (cause): what its writes became cannot be known, and its
// session, which the handler may have changed in any way, is closed
// rather than pooled.
func (t *tx) endedKeyless(ctx context.Context, conn *pgxpool.Conn, op string, cause error) error {
	t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
	return fmt.Errorf("pgstore: %s: %w: %w", op, cause, idemstore.ErrOutcomeUnknown)
}

// Rollback rolls back the handler's writes and the claim with them, and
// releases the claim's session locks, in one round trip. A handler that
// ended the transaction itself is settled as by Commit: its key becomes
// indeterminate, its session is closed, and the error wraps
// idemstore.ErrOutcomeUnknown, keyless or not: the writes it made before it
// ended the transaction may have committed, so the request must not be
// answered as one that did nothing.
func (t *tx) Rollback(ctx context.Context) error {
	conn, err := t.end()
	if err != nil {
		return err
	}
	if t.guard != nil {
		defer t.guard.release()
	}
	switch {
	case t.h.calls.outlived:
		err = errCallOutlived
	case handlerEnded(conn):
		err = errHandlerEndedTx
	default:
		stmts := []*pgx.QueuedQuery{{SQL: rollbackSQL}}
		// A failed transaction cannot be checked (sendEnding); a claim row
		// that outlives its ROLLBACK shows that the handler committed it,
		// in a transaction it ended and followed with another.
		committed := txFailed(conn) && t.claim != nil
		if committed {
			c := t.claim
			stmts = append(stmts, &pgx.QueuedQuery{SQL: markCommittedSQL, Arguments: []any{c.Tenant, c.Scope, c.Key, c.Token}})
		}
		var tag pgconn.CommandTag
		var resetErr error
		tag, err, resetErr = sendEnding(ctx, conn, t.mark, t.h, false, stmts...)
		switch {
		case err == nil && committed && tag.RowsAffected() > 0:
			err = errHandlerEndedTx
		case err == nil:
			t.s.putBack(ctx, conn, t.h, resetErr)
			return nil
		case conn.Conn().IsClosed() && !errors.Is(err, errHandlerEndedTx):
			// Whether the ROLLBACK was sent or not, the session is gone.
			t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
			return fmt.Errorf("pgstore: release: %w: %w", ErrConnClosed, err)
		}
	}
	switch {
	case errors.Is(err, errHandlerEndedTx) && t.claim != nil:
		return t.settle(ctx, conn, err)
	case errors.Is(err, errHandlerEndedTx):
		return t.endedKeyless(ctx, conn, "release", err)
	case t.claim != nil:
		return t.settle(ctx, conn, fmt.Errorf("pgstore: release: %w", err))
	}
	t.giveBackAfter(ctx, conn, err)
	return fmt.Errorf("pgstore: release: %w", err)
}

// giveBackAfter gives conn back to the pool after err ended the statements
// of a keyless transaction's end (a keyed one is settled, which closes its
// session), or closes it when err is a prepared statement that is not
// there (statementGone): a handler dropped one of pgstore's or pgx's, and
// pgx, which still takes it for prepared, would send it again on every
// later use, so that every request on the connection would fail.
func (t *tx) giveBackAfter(ctx context.Context, conn *pgxpool.Conn, err error) {
	if statementGone(err) {
		t.s.putBack(ctx, conn, t.h, errSessionDiscarded)
		return
	}
	t.s.giveBack(ctx, conn, t.h)
}

func (t *tx) end() (*pgxpool.Conn, error) {
	if t.conn == nil {
		return nil, errTxEnded
	}
	conn := t.conn
	t.conn = nil
	t.h.close()
	if t.h.calls.outlived {
		cutOff(conn)
	}
	return conn, nil
}

// cutOff closes conn's socket at once, before anything more is sent on it
// or logged: a call of the handler's still in flight (inflight.go) would
// otherwise send its statement on the connection whenever it gets there,
// after whatever the end sent, a COMMIT too, and outside every check of
// the transaction's end. Nothing of the transaction is committed by
// pgstore then; PostgreSQL rolls back what the handler did not commit
// itself, and the end treats the transaction as one the handler may have
// ended (errCallOutlived). The socket is closed under pgx, not through
// it: the call may be writing on it, and pgx would write a Terminate
// message of its own; pgx learns of the close as its Close finds it.
func cutOff(conn *pgxpool.Conn) {
	pc := conn.Conn()
	_ = pc.PgConn().Conn().Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = pc.Close(ctx)
}

// errCallOutlived is why the end of a transaction whose handler's call was
// still running (cutOff) fails its key closed: that call may have ended
// the transaction itself.
var errCallOutlived = fmt.Errorf("a call of the handler's was still running when its transaction ended: %w", errHandlerEndedTx)

// handlerTx is the pgx.Tx a transactional handler receives. It forwards to
// the transaction pgx began in the claim's batch, refuses Commit and Rollback
// (ErrTxOwned), and refuses every call once the idempotency layer has ended
// the transaction: Tx.Commit commits with a batch of its own, so pgx's
// transaction would not know it had ended, and the connection then belongs
// to the pool again. A call still in flight when the transaction ends
// costs the connection (inflight.go). Nested transactions (Begin) are
// savepoints that pgstore opens, ends and counts (savepoint.go), wrapped
// the same way: they end their savepoint themselves, but they too
// withhold the connection and refuse every call once the outer transaction
// has ended, so a savepoint kept past the handler cannot write on a pooled
// connection.
type handlerTx struct {
	tx pgx.Tx
	// calls and prepared are shared by the transaction and all its
	// nested ones.
	calls    *handlerCalls
	prepared *preparedNames
	cache    *handlerCache
	// compiled is what the end of the transaction checks of the session's
	// compiled idempotency_claim (compiled.go); nil for a transaction
	// whose handler never runs.
	compiled *compiledClaim
	// staging is what a keyed transaction stages (StageEffect), shared
	// with its nested ones; nil for a keyless one.
	staging *staging
	// savepoints are the transaction's open savepoints, shared too.
	savepoints *savepoints
	// sp is a nested transaction's savepoint, which it may end itself;
	// nil for the transaction itself.
	sp *savepoint
}

var _ pgx.Tx = (*handlerTx)(nil)

// newHandlerTx returns the pgx.Tx of a handler that writes through tx,
// with what it tells of pgx's caches kept in c (cached.go); nil for a
// transaction whose handler never runs.
func newHandlerTx(tx pgx.Tx, c *handlerCache) *handlerTx {
	if c == nil {
		c = &handlerCache{}
	}
	return &handlerTx{tx: tx, calls: new(handlerCalls), prepared: new(preparedNames), cache: c, savepoints: new(savepoints)}
}

// preparedNames are the names under which a handler prepared statements
// through pgx (handlerTx.Prepare). The session's reset drops the
// statements themselves (deallocateSQL); pgx, which keeps a statement
// under its name on the connection, must forget them too, or the next
// request's Prepare of the same name and text would be handed a statement
// the session no longer has.
type preparedNames struct {
	mu    sync.Mutex
	names []string
}

func (p *preparedNames) add(name string) {
	p.mu.Lock()
	p.names = append(p.names, name)
	p.mu.Unlock()
}

// take returns the names and forgets them.
func (p *preparedNames) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := p.names
	p.names = nil
	return names
}

func (h *handlerTx) close() { h.calls.end() }

// Begin starts a nested transaction: a savepoint that pgstore opens and
// counts (savepoint.go), so that one left open is released before the
// transaction's end.
func (h *handlerTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if !h.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer h.calls.leave()
	sp, err := h.savepoints.begin(ctx, h.tx)
	if err != nil {
		return nil, err
	}
	return &handlerTx{tx: h.tx, calls: h.calls, prepared: h.prepared, cache: h.cache, compiled: h.compiled, staging: h.staging, savepoints: h.savepoints, sp: sp}, nil
}

// enter is h.calls.enter, for a transaction that is still open: a nested
// one that ended refuses every call, as pgx's do.
func (h *handlerTx) enter() bool {
	if h.sp != nil && h.sp.closed.Load() {
		return false
	}
	return h.calls.enter()
}

// Commit returns ErrTxOwned: the idempotency layer commits. A nested
// transaction releases its savepoint.
func (h *handlerTx) Commit(ctx context.Context) error {
	return h.endNested(ctx, false)
}

// Rollback returns ErrTxOwned: the idempotency layer rolls back. A nested
// transaction rolls back to its savepoint and releases it.
func (h *handlerTx) Rollback(ctx context.Context) error {
	return h.endNested(ctx, true)
}

// endNested ends a nested transaction, rolled back or not.
func (h *handlerTx) endNested(ctx context.Context, rollback bool) error {
	switch {
	case h.sp == nil:
		return ErrTxOwned
	case !h.enter():
		return pgx.ErrTxClosed
	}
	defer h.calls.leave()
	return h.savepoints.end(ctx, h.tx, h.sp, rollback)
}

// CopyFrom forwards to the transaction. pgx is given copies of table and
// columns, from which the text it describes the table with is recorded
// (handlerCache.ranCopy): a goroutine of the handler's may write to its
// slices meanwhile.
func (h *handlerTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if !h.enter() {
		return 0, pgx.ErrTxClosed
	}
	defer h.calls.leave()
	table, columns = slices.Clone(table), slices.Clone(columns)
	h.cache.ranCopy(table, columns)
	return h.tx.CopyFrom(ctx, table, columns, src)
}

// SendBatch forwards to the transaction; its results, and the rows they
// hand out, withhold the connection (withheld.go). The batch is in flight
// until its results are closed.
func (h *handlerTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !h.enter() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	if b != nil {
		// What is checked and sent is a copy of the handler's batch,
		// which it cannot change meanwhile.
		b = withheldBatch(b)
		for _, q := range b.QueuedQueries {
			if err := h.calls.refuseEnding(q.SQL); err != nil {
				h.calls.leave()
				return pgx.FailedBatchResults(b, err)
			}
		}
	}
	h.cache.ranBatch(b, h.calls)
	return &handlerBatch{br: h.tx.SendBatch(ctx, b), calls: h.calls}
}

// LargeObjects forwards to the transaction. The large objects run their
// statements through h, so that each is one of the handler's calls
// (inflight.go).
func (h *handlerTx) LargeObjects() pgx.LargeObjects {
	h.cache.ranLargeObjects()
	lo := h.tx.LargeObjects()
	throughHandler(&lo, h)
	return lo
}

// Prepare forwards to the transaction. The statement lasts as long as the
// transaction: it is dropped before the connection serves another request.
// A name with the prefix of pgx's statement cache is refused
// (ErrCacheName), and so is a name that reads as SQL (ErrPreparedName)
// and a statement that would end the transaction when executed
// (ErrHandlerEndsTransaction).
func (h *handlerTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if !h.enter() {
		return nil, pgx.ErrTxClosed
	}
	defer h.calls.leave()
	if strings.HasPrefix(name, cachePrefix) || strings.HasPrefix(name, ownPrefix) {
		return nil, fmt.Errorf("%w: %q", ErrCacheName, name)
	}
	if preparedNameRefused(name) {
		return nil, fmt.Errorf("%w: %.60q", ErrPreparedName, name)
	}
	if err := h.calls.refuseEnding(sql); err != nil {
		return nil, err
	}
	if name != "" {
		h.prepared.add(name)
	}
	return h.tx.Prepare(ctx, name, sql)
}

// Exec forwards to the transaction. A statement that would end the
// transaction is refused (ErrHandlerEndsTransaction), as by every call
// that takes SQL.
func (h *handlerTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !h.enter() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	defer h.calls.leave()
	if err := h.calls.refuseEnding(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return h.tx.Exec(ctx, sql, h.cache.ran(sql, args, execOption, h.calls)...)
}

// Query forwards to the transaction; its rows withhold the connection
// (withheld.go). The query is in flight until its rows are closed.
func (h *handlerTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !h.enter() {
		return closedRows{}, pgx.ErrTxClosed
	}
	if err := h.calls.refuseEnding(sql); err != nil {
		h.calls.leave()
		return refusedRows{err}, err
	}
	rows, err := h.tx.Query(ctx, sql, h.cache.ran(sql, args, queryOption, h.calls)...)
	if err != nil || rows == nil {
		// pgx closed the rows of a query that failed.
		h.calls.leave()
		return withheld(rows, nil), err
	}
	return withheld(rows, h.calls), nil
}

// QueryRow forwards to the transaction; its row withholds the
// connection (withheld.go). The query is in flight until pgx returns its
// row: a row not yet scanned holds the connection busy, and
// the statements that end the transaction then fail, which closes the
// connection.
func (h *handlerTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !h.enter() {
		return closedRows{}
	}
	defer h.calls.leave()
	if err := h.calls.refuseEnding(sql); err != nil {
		return refusedRows{err}
	}
	return handlerRow{h.tx.QueryRow(ctx, sql, h.cache.ran(sql, args, queryOption, h.calls)...)}
}

// Conn returns nil. The connection is the idempotency layer's: through it a
// handler could end the transaction or write outside it, and the key could
// not be kept. A handler that calls a method on the nil connection panics,
// which the engine treats like any panic: the transaction is rolled back
// and the key released.
func (h *handlerTx) Conn() *pgx.Conn { return nil }

// refusedRows answers every call on a refused query with its error.
type refusedRows struct{ err error }

func (refusedRows) Close()                                       {}
func (r refusedRows) Err() error                                 { return r.err }
func (refusedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (refusedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (refusedRows) Next() bool                                   { return false }
func (r refusedRows) Scan(...any) error                          { return r.err }
func (r refusedRows) Values() ([]any, error)                     { return nil, r.err }
func (refusedRows) RawValues() [][]byte                          { return nil }
func (refusedRows) Conn() *pgx.Conn                              { return nil }
func (refusedRows) TypeMap() *pgtype.Map                         { return nil }

// closedRows answers every call on an ended transaction with
// pgx.ErrTxClosed.
type closedRows struct{}

func (closedRows) Close()                                       {}
func (closedRows) Err() error                                   { return pgx.ErrTxClosed }
func (closedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (closedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (closedRows) Next() bool                                   { return false }
func (closedRows) Scan(...any) error                            { return pgx.ErrTxClosed }
func (closedRows) Values() ([]any, error)                       { return nil, pgx.ErrTxClosed }
func (closedRows) RawValues() [][]byte                          { return nil }
func (closedRows) Conn() *pgx.Conn                              { return nil }
func (closedRows) TypeMap() *pgtype.Map                         { return nil }
