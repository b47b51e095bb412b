package pgstore

import (
	"bytes"
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// A claim takes its request's advisory lock, then the key's
// (idempotency_claim), and one that gets the first but not the second
// reads the key as held by another request: 'busy_other', a 422. The
// inference holds while a holder keeps both locks, but PostgreSQL frees a
// backend's locks one at a time, in no set order (at the end of a
// transaction, in pg_advisory_unlock_all, when a backend dies). For a
// moment a holder of this very request can hold the key's lock without
// the request's, and a retry of it would be told to change its key.
//
// settleSQL decides such a claim from what is visible a moment later, in a
// statement of its own (a new snapshot under READ COMMITTED):
//   - the key's row, if it is committed by now: it decides as any row does;
//   - otherwise whether the session holding the key's lock also holds a
//     request lock that is not this claim's (any other advisory lock in the
//     one-bigint space). A holder of another request keeps its request's
//     lock for as long as the key's, so it has one; a holder being given
//     back, whose request lock is already free, has none, and neither has a
//     key that is free again by now.
//
// It reads pg_locks, which briefly locks the whole lock table, and costs a
// round trip: it runs only on this rare path, never on a claim that wins,
// replays or meets a visible row. The lock ids are split as PostgreSQL
// shows a one-bigint advisory lock in pg_locks: classid the high half,
// objid the low half, objsubid 1.
const settleSQL = `SELECT k.state, k.operation, k.fingerprint,
       (extract(epoch FROM k.lease_until - clock_timestamp()) * 1000000)::bigint,
       k.status, k.headers, k.body, k.body_omitted,
       EXISTS (SELECT 1
                 FROM pg_locks h
                 JOIN pg_locks o
                   ON o.pid = h.pid AND o.locktype = 'advisory' AND o.granted
                  AND o.objsubid = 1 AND o.database = h.database
                WHERE h.locktype = 'advisory' AND h.granted AND h.objsubid = 1
                  AND h.pid <> pg_backend_pid()
                  AND h.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND h.classid = l.key_hi AND h.objid = l.key_lo
                  AND NOT (o.classid = l.key_hi AND o.objid = l.key_lo)
                  AND NOT (o.classid = l.req_hi AND o.objid = l.req_lo))
  FROM (SELECT ((i.k >> 32) & 4294967295)::oid AS key_hi, (i.k & 4294967295)::oid AS key_lo,
               ((i.r >> 32) & 4294967295)::oid AS req_hi, (i.r & 4294967295)::oid AS req_lo
          FROM (SELECT idempotency_lock_id($1, $2, $3) AS k,
                       idempotency_request_lock_id($1, $2, $3, $4, $5) AS r) i) l
  LEFT JOIN idempotency_keys k
    ON k.tenant = $1 AND k.scope = $2 AND k.key = $3
   AND k.expires_at > clock_timestamp()`

// rowQuerier is a pool, a pooled connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// settle answers a claim that idempotency_claim left 'busy_other'
// (settleSQL says why and how). It never writes: a row it cannot decide
// without writing (an abandoned claim of this request) is left to the
// client's next retry, which is told the key is in flight.
func settle(ctx context.Context, q rowQuerier, c idemstore.Claim) (idemstore.Result, error) {
	var (
		state, operation pgtype.Text
		remaining        pgtype.Int8
		status           pgtype.Int4
		omitted          pgtype.Bool
		fingerprint      []byte
		headers, body    []byte
		another          bool
	)
	err := q.QueryRow(ctx, settleSQL, c.Tenant, c.Scope, c.Key, c.Operation, fingerprintArg(c.Fingerprint)).
		Scan(&state, &operation, &fingerprint, &remaining, &status, &headers, &body, &omitted, &another)
	if err != nil {
		return idemstore.Result{}, err
	}
	if !state.Valid {
		if another {
			return busyOtherResult(c), nil
		}
		return busyResult(c), nil
	}
	r := claimRow{
		state:       state.String,
		operation:   operation.String,
		fingerprint: fingerprint,
		status:      status.Int32,
		headers:     headers,
		body:        body,
		omitted:     omitted.Bool,
	}
	if r.state == string(idemstore.StateInFlight) {
		same := r.operation == c.Operation && bytes.Equal(r.fingerprint, c.Fingerprint)
		if same && remaining.Int64 <= 0 {
			return busyResult(c), nil
		}
		r.remaining = microseconds(remaining.Int64)
	}
	return r.result(c)
}
