package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// A transactional claim's transaction is bounded by its lease through
// idle_in_transaction_session_timeout and statement_timeout, which it sets
// with SET LOCAL as it begins (txTimeoutsSQL): PostgreSQL ends a session
// that sits idle in the transaction, or runs one statement, for longer.
// Both are settings a handler may change from its transaction, and one
// that switches them off keeps its transaction, and the key's locks with
// it, past the lease. While its process lives that is a handler that never
// returns; but when its host dies without closing its sockets, the server
// keeps the idle transaction open until TCP keepalive notices, hours
// later, and every retry of the key would be told it is in flight.
//
// So a claim that meets its key's locks held ('busy', 'busy_other') ends
// the session that holds the key's lock when that session has been idle in
// its transaction, or running one statement, for longer than its lease
// and reapGrace: what the timeouts its transaction began with would have
// ended by then, had they been left as they were set. A claim's
// transaction wears its lease for this (txTimeoutsSQL: a lock of
// badgeClass whose second key is the lease's milliseconds negated, which
// no badge can be), and one that wears several is measured by the
// longest. A holder that wears none is never ended: its transaction takes
// the lock with a try, which fails while another session holds it
// exclusively or waits for it so (any session may, a handler's too), and
// the lease of the claim that meets it, which may be shorter than the
// holder's own, tells nothing of when the holder's timeouts would have
// ended it. A holder within its lease, or one that keeps running
// statements shorter than it, is never ended. The cost: a dead host whose
// handler switched off its timeouts in a transaction that began without
// its lease (a handler held the lock then, or the process was of an
// earlier version) keeps the key until TCP keepalive notices, as every
// such host did before the reap. Only
// a session of the claim's own role is ended, as PostgreSQL lets it
// (pg_terminate_backend), and none where the role may not call
// pg_terminate_backend (docs/semantics.md §7.2); the claim is answered
// 409, and its retry finds the key free once the server has rolled the
// holder back. A transactional claim sends it behind the COMMIT of its
// lost claim, in the same round trip; a plain one, whose key is held so
// only for the moment of another claim's call, in a round trip of its
// own.
//
// Its functions and operators are pg_catalog's by name, its parameters
// cast, as in every statement that runs outside the checked end of a
// handler's transaction (docs/semantics.md §7.2).
const reapSQL = `SELECT a.pid, a.state,
       (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) a.state_change)
          OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8,
       e.ms, pg_catalog.pg_terminate_backend(a.pid)
  FROM idempotency_lock_id($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text) AS l(id),
       pg_catalog.pg_locks h
  JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) h.pid,
       LATERAL (SELECT pg_catalog.max(4294967296 OPERATOR(pg_catalog.-) e.objid::pg_catalog.int8) AS ms
                  FROM pg_catalog.pg_locks e
                 WHERE e.pid OPERATOR(pg_catalog.=) h.pid AND e.locktype OPERATOR(pg_catalog.=) 'advisory'
                   AND e.granted AND e.objsubid OPERATOR(pg_catalog.=) 2
                   AND e.classid OPERATOR(pg_catalog.=) $4::pg_catalog.int8::pg_catalog.oid
                   AND e.objid OPERATOR(pg_catalog.>=) 2147483648::pg_catalog.int8::pg_catalog.oid) e
 WHERE h.locktype OPERATOR(pg_catalog.=) 'advisory' AND h.granted
   AND h.objsubid OPERATOR(pg_catalog.=) 1
   AND h.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
   AND h.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                          WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
   AND h.classid OPERATOR(pg_catalog.=) ((l.id OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
   AND h.objid OPERATOR(pg_catalog.=) (l.id OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
   AND a.usename OPERATOR(pg_catalog.=) CURRENT_USER
   AND pg_catalog.has_function_privilege('pg_catalog.pg_terminate_backend'::pg_catalog.regproc::pg_catalog.oid, 'EXECUTE')
   AND a.state OPERATOR(pg_catalog.<>) 'idle'
   AND e.ms IS NOT NULL
   AND a.state_change OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
       ((e.ms OPERATOR(pg_catalog.+) $5::pg_catalog.int8)::pg_catalog.float8
        OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval))`

// reapGrace is how long past a claim's lease the session holding its key
// is left before the claim ends it (reapSQL): the 5 s a dead host's guard
// lasts (guardSessionTimeout), within which a key such a host held is
// free again once its lease has run out (docs/semantics.md §5.1).
const reapGrace = guardSessionTimeout

// reapArgs are reapSQL's arguments for a claim of c, in text, and their
// types.
func reapArgs(c idemstore.Claim) ([][]byte, []uint32) {
	values := [][]byte{[]byte(c.Tenant), []byte(c.Scope), []byte(c.Key),
		strconv.AppendInt(nil, int64(badgeClass), 10),
		strconv.AppendInt(nil, reapGrace.Milliseconds(), 10)}
	oids := []uint32{pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.Int8OID, pgtype.Int8OID}
	return values, oids
}

// reaped logs the sessions that reapSQL ended, from its result res, in
// text, and returns its error.
func (s *Store) reaped(ctx context.Context, res *pgconn.Result) error {
	if res.Err != nil {
		return fmt.Errorf("ending a holder past its lease: %w", res.Err)
	}
	for _, row := range res.Rows {
		if len(row) != 5 {
			return fmt.Errorf("ending a holder past its lease: %d columns, want 5", len(row))
		}
		pid, _ := strconv.Atoi(string(row[0]))
		idle, _ := strconv.ParseInt(string(row[2]), 10, 64)
		lease, _ := strconv.ParseInt(string(row[3]), 10, 64)
		s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: ended a session that held a key past its lease",
			slog.Int("pid", pid), slog.String("state", string(row[1])), slog.Duration("for", time.Duration(idle)*time.Millisecond),
			slog.Duration("lease", time.Duration(lease)*time.Millisecond), slog.Bool("ended", string(row[4]) == "t"))
	}
	return nil
}

// answerHeld answers, on conn, a plain claim of c that idempotency_claim
// left with outcome and res: one that met its key's locks held ends a
// holder past its lease (reapSQL, a round trip of its own; its failure is
// logged, and the claim answered as it was), and one that
// met them held without its request's ('busy_other') asks whom the holder
// serves (settle). A transactional claim sends reapSQL behind the COMMIT
// of its lost claim instead (commitLost).
func (s *Store) answerHeld(ctx context.Context, conn *pgxpool.Conn, c idemstore.Claim, outcome string, res idemstore.Result) (idemstore.Result, error) {
	var err error
	if outcome == outcomeBusyElse {
		res, err = settle(ctx, conn, c)
	}
	if err == nil && held(outcome) {
		values, oids := reapArgs(c)
		if rerr := s.reaped(ctx, conn.Conn().PgConn().ExecParams(ctx, reapSQL, values, oids, nil, nil).Read()); rerr != nil {
			s.logger.LogAttrs(ctx, slog.LevelWarn, reapFailed, slog.Any("err", rerr))
		}
	}
	return res, err
}

// reapFailed is the warning of a failed reapSQL: the claim is answered as
// it would have been, and its retry looks again.
const reapFailed = "pgstore: looking for a session that held a key past its lease failed"

// held reports idempotency_claim's outcomes for a key whose locks another
// session holds.
func held(outcome string) bool {
	return outcome == outcomeBusy || outcome == outcomeBusyElse
}
