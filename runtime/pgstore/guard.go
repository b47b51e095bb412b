package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/pgconnect"
)

// A won transactional claim keeps its key with advisory locks on the
// handler's own session. Those a handler can drop: a raw ROLLBACK ends the
// transaction-level locks and the claim row, pg_advisory_unlock_all() (or
// DISCARD ALL) the session-level ones, and a retry would then win the key
// while the handler still writes, in autocommit. The guard closes that
// door from a session the handler cannot reach: for as long as a
// transactional claim of this Store holds a key, one connection of the
// Store's own holds a second lock on the key, guardSQL's, at session
// level. Every transactional claim asks for that lock too, and a claim
// that wins the key's row but not its guard gives the row back and answers
// "in flight" (docs/semantics.md §9 defines the guard and settling). The
// guard is let go only after Commit or Rollback has
// settled the key, so a key whose handler ended the transaction is already
// indeterminate by then.
//
// The guard's lock travels on its own connection at the same time as the
// claim's batch, so it adds no round trip to a claim's latency. Requests
// share the connection: each flush sends every lock and unlock waiting at
// that moment in one statement. A process that dies takes the
// connection and its locks with it, as it does the claim's session, so a
// crash still frees the key for the next retry at once.
//
// A host that dies without closing its sockets (a power loss, a frozen
// VM, a network partition) leaves the server an open, idle session:
// PostgreSQL ends the handler's transaction when its lease runs out, but
// nothing ends a session idle outside a transaction before TCP keepalive
// notices the dead peer, hours later, and its guards would keep every
// retry of their keys out until then. So the guard's session is bounded by
// the server: its idle_session_timeout is guardSessionTimeout, and while
// the connection is open a heartbeat goes out whenever it has been idle
// for guardHeartbeat, so that only a host that stopped talking loses it
// (docs/semantics.md §5.1). The heartbeat travels only on an idle
// connection: a busy one is kept alive by its guards' own statements.

// guardSQL takes and lets go of guards, every one a flush has, in one
// statement: row n of the result answers op n. A guard is the key's lock
// in the two-int advisory lock space, which PostgreSQL keeps apart from the
// one-bigint space of the claim's own locks, on the same hash
// (idempotency_lock_id); the low half is sign-extended so that both halves
// fit an int4. A flush never holds two ops of one key (guard.lock), so the
// order in which the rows are evaluated does not matter.
//
// Its functions and operators are pg_catalog's by name, its parameters
// cast, as in every statement that runs outside the checked end of a
// handler's transaction (docs/semantics.md §7.2); idempotency_lock_id is
// the store's, a name the end refuses in every schema. The arrays are
// unnested side by side in ROWS FROM, what unnest of several arrays, a
// form of the grammar that only the unqualified name takes, stands for.
const guardSQL = `SELECT CASE WHEN o.unlock
            THEN pg_catalog.pg_advisory_unlock(` + guardKeysSQL + `)
            ELSE pg_catalog.pg_try_advisory_lock(` + guardKeysSQL + `)
       END
  FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]),
                  pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::pg_catalog.bool[])) WITH ORDINALITY
       AS o(tenant, scope, key, unlock, n),
       LATERAL idempotency_lock_id(o.tenant, o.scope, o.key) AS l
 ORDER BY o.n`

// guardKeysSQL are the two int4 keys of a guard whose key's lock is l.
const guardKeysSQL = `(l OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4,
                    ((l OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4`

// guardSessionSQL bounds the guard's session on the server: PostgreSQL
// ends it once it has been idle for $1 milliseconds, and its locks with
// it. A server without idle_session_timeout (before PostgreSQL 14) keeps
// the bound of TCP keepalive.
const guardSessionSQL = `SELECT pg_catalog.set_config('idle_session_timeout', $1::pg_catalog.text, false)
 WHERE pg_catalog.current_setting('idle_session_timeout', true) IS NOT NULL`

// guardHeartbeat is how long the guard's connection stays idle before a
// heartbeat keeps its session alive; guardSessionTimeout is how long the
// server lets it stay idle, a few heartbeats, and so how long past its
// lease a key a dead host held stays held.
const (
	guardHeartbeat      = time.Second
	guardSessionTimeout = 5 * time.Second
)

// guardIdleClose is how long the guard's connection stays open, by
// default, with no key held and nothing to send.
const guardIdleClose = time.Second

// errGuardBusy is the answer to a guard lock held elsewhere: another
// transactional claim of the key is running, in this process or another.
var errGuardBusy = errors.New("pgstore: the key's guard is held by another request")

// guard holds one session-level advisory lock per key that a transactional
// claim of its Store holds, on one connection of its own.
type guard struct {
	connect func(context.Context) (*pgx.Conn, error)
	logger  *slog.Logger

	mu sync.Mutex
	// queue waits for the next flush; flushing is set while a goroutine
	// sends (one at a time, the connection's only user).
	queue    []*guardOp
	flushing bool
	conn     *pgx.Conn
	// gen counts the connections opened: a lock is held only on the
	// connection it was taken on.
	gen uint64
	// held maps each key this process holds (or is asking for) to the
	// ticket that owns it.
	held map[idemstore.Identity]*guardTicket
	// unlockTimer flushes unlocks that found no lock to travel with.
	unlockTimer *time.Timer
	// releasing counts the releases running in the background
	// (releaseLater).
	releasing int
	idle      *time.Timer
	// beat sends the heartbeat once the connection has been idle for
	// guardHeartbeat.
	beat *time.Timer
	// idleClose is how long the connection stays open while idle.
	idleClose time.Duration
	// heartbeatAfter and sessionTimeout are guardHeartbeat and
	// guardSessionTimeout.
	heartbeatAfter, sessionTimeout time.Duration
}

// guardOp is one lock or unlock on its way to the guard's connection.
type guardOp struct {
	id     idemstore.Identity
	unlock bool
	// gen is the connection an unlock's guard was taken on.
	gen uint64
	// ticket is the lock's ticket, which receives its outcome; nil for an
	// unlock.
	ticket *guardTicket
}

// guardTicket is a lock asked for: wait for it, then let it go with
// release, whatever the outcome.
type guardTicket struct {
	g  *guard
	id idemstore.Identity
	// done receives the outcome of the lock: nil when held, errGuardBusy,
	// or why it could not be asked. Buffered.
	done chan error
	err  error
	// gen is the connection the guard was granted on, 0 until it is;
	// guarded by g.mu.
	gen uint64
	// waited is set once wait has read done.
	waited bool
}

// newGuard returns the guard of a store on pool. Its connection is made by
// connect, or, when connect is nil, with the pool's configuration and
// connect hooks.
func newGuard(pool *pgxpool.Pool, connect func(context.Context) (*pgx.Conn, error), logger *slog.Logger) *guard {
	g := &guard{
		logger:         logger,
		held:           make(map[idemstore.Identity]*guardTicket),
		idleClose:      guardIdleClose,
		heartbeatAfter: guardHeartbeat,
		sessionTimeout: guardSessionTimeout,
		connect:        connect,
	}
	if g.connect == nil {
		g.connect = pgconnect.Like(pool.Config())
	}
	return g
}

// lock asks for id's guard and returns at once; the ticket's wait tells the
// outcome. A key that a request of this process holds (or is asking for)
// is busy without asking the database: advisory locks are reentrant within
// a session, so the database would grant it again.
func (g *guard) lock(id idemstore.Identity) *guardTicket {
	t := &guardTicket{g: g, id: id, done: make(chan error, 1)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.held[id]; ok {
		t.done <- errGuardBusy
		return t
	}
	// A guard this process let go of, whose unlock has not been sent yet,
	// is still held: take it over instead of sending both.
	for i, op := range g.queue {
		if op.unlock && op.id == id && op.gen == g.gen {
			g.queue = slices.Delete(g.queue, i, i+1)
			g.held[id], t.gen = t, op.gen
			t.done <- nil
			return t
		}
	}
	g.held[id] = t
	g.enqueue(&guardOp{id: id, ticket: t})
	return t
}

// The guard of a key whose claim was won can be busy for a moment
// without anything wrong: a concurrent claim of the same key asked for it
// first and lost the key's row to this one, and lets it go as soon as it
// has seen that. await asks again, after guardRetryFirst, then twice as
// long each time, until guardRetryLast (about a quarter of a second in
// all); a guard still busy then belongs to a request that holds the key
// although its row does not say so.
const (
	guardRetryFirst = time.Millisecond
	guardRetryLast  = 128 * time.Millisecond
)

// await waits for *t and returns its outcome, asking again while it is
// busy (see guardRetryFirst); *t is the last ticket asked for. It gives up
// early when ctx is done: the ticket must then be let go with
// releaseLater.
func (g *guard) await(ctx context.Context, t **guardTicket) error {
	err := (*t).waitCtx(ctx)
	for delay := guardRetryFirst; errors.Is(err, errGuardBusy) && delay <= guardRetryLast; delay *= 2 {
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		*t = g.lock((*t).id)
		err = (*t).waitCtx(ctx)
	}
	return err
}

// wait returns the outcome of the lock: nil when this request holds the
// guard.
func (t *guardTicket) wait() error {
	if !t.waited {
		t.err = <-t.done
		t.waited = true
	}
	return t.err
}

// waitCtx is wait, giving up when ctx is done first; the lock may then
// still be granted, so the ticket must be let go with releaseLater.
func (t *guardTicket) waitCtx(ctx context.Context) error {
	if t.waited {
		return t.err
	}
	select {
	case err := <-t.done:
		t.err, t.waited = err, true
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// releaseLater is release, run in the background: a request that does not
// need its guard does not wait for the lock's answer to let it go.
func (t *guardTicket) releaseLater() {
	g := t.g
	g.mu.Lock()
	g.releasing++
	g.mu.Unlock()
	go func() {
		t.release()
		g.mu.Lock()
		g.releasing--
		g.mu.Unlock()
	}()
}

// release lets the guard go once the key is settled; a lock that was not
// granted, or whose connection has since been lost, sends nothing.
func (t *guardTicket) release() {
	if t.wait() != nil {
		return
	}
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[t.id] != t || t.gen != g.gen {
		return
	}
	delete(g.held, t.id)
	g.enqueue(&guardOp{id: t.id, unlock: true, gen: g.gen})
}

// enqueue queues op. A lock starts a flush unless one is running; an
// unlock waits to travel with the next lock, or guardUnlockDelay at most:
// a guard held a little longer only keeps out claims that would meet the
// key's row anyway, and a claim of this process takes it over (lock).
// g.mu is held.
func (g *guard) enqueue(op *guardOp) {
	g.queue = append(g.queue, op)
	if g.idle != nil {
		g.idle.Stop()
		g.idle = nil
	}
	switch {
	case g.flushing:
	case op.unlock:
		if g.unlockTimer == nil {
			g.unlockTimer = time.AfterFunc(guardUnlockDelay, g.flushUnlocks)
		}
	default:
		g.startFlush()
	}
}

// guardUnlockDelay bounds how long an unlock waits for a lock to travel
// with.
const guardUnlockDelay = 10 * time.Millisecond

// startFlush starts the goroutine that sends what is queued. g.mu is held.
func (g *guard) startFlush() {
	if g.unlockTimer != nil {
		g.unlockTimer.Stop()
		g.unlockTimer = nil
	}
	g.flushing = true
	go g.flush()
}

// flushUnlocks sends the unlocks that waited guardUnlockDelay for a lock.
func (g *guard) flushUnlocks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unlockTimer = nil
	if !g.flushing && len(g.queue) > 0 {
		g.startFlush()
	}
}

// flush sends what is queued, one statement after another, while a lock
// is among it; unlocks left alone wait as enqueue says.
func (g *guard) flush() {
	for first := true; ; first = false {
		g.mu.Lock()
		ops := g.queue
		if len(ops) == 0 || (!first && !slices.ContainsFunc(ops, func(op *guardOp) bool { return !op.unlock })) {
			g.flushing = false
			if len(ops) > 0 {
				g.unlockTimer = time.AfterFunc(guardUnlockDelay, g.flushUnlocks)
			} else if len(g.held) == 0 && g.conn != nil {
				g.idle = time.AfterFunc(g.idleClose, g.closeIdle)
			}
			// A connection that holds nothing and closes before its
			// heartbeat is due needs none.
			g.stopBeat()
			if g.conn != nil && (len(g.held) > 0 || g.idleClose >= g.heartbeatAfter) {
				g.beat = time.AfterFunc(g.heartbeatAfter, g.heartbeat)
			}
			g.mu.Unlock()
			return
		}
		g.queue = nil
		conn, gen := g.conn, g.gen
		g.mu.Unlock()
		g.send(conn, gen, ops)
	}
}

// send sends ops in one statement on conn, opening a connection first when
// there is none, and hands each lock its outcome.
func (g *guard) send(conn *pgx.Conn, gen uint64, ops []*guardOp) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var err error
	if conn == nil || conn.IsClosed() {
		if conn, err = g.connect(ctx); err != nil {
			g.fail(ops, nil, fmt.Errorf("pgstore: guard: connect: %w", err))
			return
		}
		g.mu.Lock()
		timeout := g.sessionTimeout
		g.mu.Unlock()
		if _, err = conn.Exec(ctx, guardSessionSQL, fmt.Sprint(timeout.Milliseconds())); err != nil {
			_ = conn.Close(ctx)
			g.fail(ops, nil, fmt.Errorf("pgstore: guard: idle_session_timeout: %w", err))
			return
		}
		g.mu.Lock()
		g.gen++
		g.conn, gen = conn, g.gen
		// Guards taken on an earlier connection went with it.
		for id, owner := range g.held {
			if owner.gen != 0 {
				delete(g.held, id)
			}
		}
		g.mu.Unlock()
	}
	// The unlocks of guards taken on an earlier connection have nothing
	// left to let go of.
	ops = slices.DeleteFunc(ops, func(op *guardOp) bool { return op.unlock && op.gen != gen })
	if len(ops) == 0 {
		return
	}
	n := len(ops)
	tenants, scopes, keys, unlocks := make([]string, n), make([]string, n), make([]string, n), make([]bool, n)
	for i, op := range ops {
		tenants[i], scopes[i], keys[i], unlocks[i] = op.id.Tenant, op.id.Scope, op.id.Key, op.unlock
	}
	got := make([]bool, 0, n)
	var ok bool
	// A query that fails to start hands its error to its rows too.
	rows, _ := conn.Query(ctx, guardSQL, tenants, scopes, keys, unlocks)
	_, err = pgx.ForEachRow(rows, []any{&ok}, func() error {
		got = append(got, ok)
		return nil
	})
	if err == nil && len(got) != n {
		err = fmt.Errorf("%d answers to %d guard operations", len(got), n)
	}
	if err != nil {
		g.fail(ops, conn, fmt.Errorf("pgstore: guard: %w", err))
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, op := range ops {
		switch {
		case op.unlock:
		case got[i]:
			op.ticket.gen = gen
			op.ticket.done <- nil
		default:
			g.forget(op.ticket)
			op.ticket.done <- errGuardBusy
		}
	}
}

// fail answers every lock of ops with err. With conn, the batch failed on
// it: the connection is closed, and every guard it held is gone with it;
// the claims they kept still hold their keys with their own locks, which
// only a handler that drops them on purpose gets rid of.
func (g *guard) fail(ops []*guardOp, conn *pgx.Conn, err error) {
	g.mu.Lock()
	lost := 0
	for _, op := range ops {
		if !op.unlock {
			g.forget(op.ticket)
			op.ticket.done <- err
		}
	}
	if conn != nil && g.conn == conn {
		for id, owner := range g.held {
			if owner.gen != 0 {
				delete(g.held, id)
				lost++
			}
		}
		g.conn = nil
	}
	g.mu.Unlock()
	if conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		_ = conn.Close(ctx)
		cancel()
	}
	g.logger.LogAttrs(context.Background(), slog.LevelWarn, "pgstore: the guard connection failed",
		slog.Int("guards_lost", lost), slog.Any("err", err))
}

// forget drops t's key from g.held if t owns it. g.mu is held.
func (g *guard) forget(t *guardTicket) {
	if g.held[t.id] == t {
		delete(g.held, t.id)
	}
}

// heartbeat keeps the session of a connection idle for guardHeartbeat
// alive: it sends what waits to be sent, or an empty statement, and waits
// again (flush).
func (g *guard) heartbeat() {
	g.mu.Lock()
	conn := g.conn
	if g.flushing || conn == nil {
		g.mu.Unlock()
		return
	}
	g.beat = nil
	if len(g.queue) > 0 {
		g.startFlush()
		g.mu.Unlock()
		return
	}
	g.flushing = true
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	err := conn.Ping(ctx)
	cancel()
	if err != nil {
		g.fail(nil, conn, fmt.Errorf("pgstore: guard: heartbeat: %w", err))
	}
	g.flush()
}

// stopBeat stops the heartbeat's timer. g.mu is held.
func (g *guard) stopBeat() {
	if g.beat != nil {
		g.beat.Stop()
		g.beat = nil
	}
}

// closeIdle closes the guard's connection when it still holds nothing and
// nothing waits to be sent.
func (g *guard) closeIdle() {
	g.mu.Lock()
	conn := g.conn
	if g.flushing || len(g.queue) > 0 || len(g.held) > 0 || conn == nil {
		g.mu.Unlock()
		return
	}
	g.conn, g.idle = nil, nil
	g.stopBeat()
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// quiet reports whether the guard has nothing queued or being sent.
func (g *guard) quiet() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.flushing && len(g.queue) == 0 && g.releasing == 0
}
