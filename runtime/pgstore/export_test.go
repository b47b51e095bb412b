package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// GuardQuiet reports whether s's guard has nothing queued or being sent.
func GuardQuiet(s *Store) bool { return s.guard.quiet() }

// SetGuardIdleClose sets how long s's guard connection stays open while
// idle.
func SetGuardIdleClose(s *Store, d time.Duration) {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	s.guard.idleClose = d
}

// SetGuardHeartbeat sets how long s's guard connection stays idle before
// a heartbeat, and the idle_session_timeout of the sessions it opens next.
func SetGuardHeartbeat(s *Store, after, timeout time.Duration) {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	s.guard.heartbeatAfter, s.guard.sessionTimeout = after, timeout
}

// Settle decides c as a claim answered 'busy_other' is decided.
func Settle(ctx context.Context, pool *pgxpool.Pool, c idemstore.Claim) (idemstore.Result, error) {
	return settle(ctx, pool, c)
}

// QueueReset queues the statements of the full session reset (resetSQL
// and reseedSQL) on b.
func QueueReset(b *pgx.Batch) {
	for _, q := range resetSQL {
		b.Queue(q)
	}
	b.Queue(reseedSQL, newSeed())
}

// QueueLeanReset queues the statements a transaction's end sends to reset
// the session of a connection of user when the handler left nothing else
// (sessionCheckSQL, leanResetSQL and replacedSQL) on b.
func QueueLeanReset(b *pgx.Batch, user string) {
	b.QueuedQueries = append(b.QueuedQueries, leanReset(user, time.Now(), 0)...)
	b.Queue(replacedSQL, 0)
}

// ClaimSQL is the statement that claims a key.
const ClaimSQL = claimSQL

// RequestBadge returns the two keys of the advisory lock that a
// transactional claim of c holds for as long as its transaction.
func RequestBadge(c idemstore.Claim) (class, badge int32) { return badgeClass, requestBadge(c) }

// SessionCheckSQL is the check of what a handler left on its session.
const SessionCheckSQL = sessionCheckSQL

// Reset sends the full session reset on conn, as the store sends it.
func Reset(ctx context.Context, conn *pgx.Conn) error { return sendReset(ctx, conn, false, false) }

// DeallocateSQL is the full reset's statement that drops the statements a
// handler prepared.
const DeallocateSQL = deallocateSQL

// OwnName is the name under which pgstore prepares sql on a connection.
func OwnName(sql string) string { return ownName(sql) }

// SameTxSQL is the check that a transaction is still pgstore's.
const SameTxSQL = sameTxSQL

// CompleteSQL is the completion of a claim made outside a transaction.
const CompleteSQL = completeSQL

// ReleaseSQL is the release of a claim made outside a transaction.
const ReleaseSQL = releaseSQL

// CompleteTxSQL is the completion of a claim inside its transaction.
const CompleteTxSQL = completeTxSQL

// TxTimeoutsSQL is the statement that bounds and marks a transaction.
const TxTimeoutsSQL = txTimeoutsSQL

// ConnOf returns the connection under t, which its handler is never
// handed: a test's stand-in for a route to it not yet closed.
func ConnOf(t idemstore.Tx) *pgx.Conn { return t.(*tx).conn.Conn() }

// CacheName is the name under which pgx's statement cache prepares sql.
func CacheName(sql string) string { return cacheName(sql) }

// EndsTx is endsTx: whether a handler's SQL text ends or begins a
// transaction.
func EndsTx(sql string) bool { return endsTx(sql) }

// LexedEndsTx is lexedEnding: whether a statement of sql, split as the
// server splits it, ends or begins a transaction, without the refusal of
// texts of several statements that name a keyword anywhere.
func LexedEndsTx(sql string) bool { return lexedEnding(sql) }

// Unchecked returns the pgx transaction under the pgx.Tx that t's handler
// receives, which sends a handler's SQL without refusing the statements
// that end the transaction: what the end of the transaction checks, after
// the fact, for a statement that ends it anyway.
func Unchecked(t idemstore.Tx) pgx.Tx { return t.(*tx).h.tx }

// UncheckedTx is Unchecked for the pgx.Tx a handler receives.
func UncheckedTx(h pgx.Tx) pgx.Tx { return h.(*handlerTx).tx }

// PrepareUnchecked prepares sql under name on the connection of tx, a
// handler's transaction, as its Prepare does, without refusing the name
// (ErrPreparedName).
func PrepareUnchecked(ctx context.Context, tx pgx.Tx, name, sql string) error {
	h := tx.(*handlerTx)
	h.prepared.add(name)
	_, err := h.tx.Prepare(ctx, name, sql)
	return err
}

// StageSQL is the text of StageEffect's statement for table.
func StageSQL(table pgx.Identifier) string { return fmt.Sprintf(stageSQL, table.Sanitize()) }
