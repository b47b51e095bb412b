package pgstore

import (
	"bytes"
	"context"
	"math"

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
//   - otherwise whether the session holding the key's lock wears the badge
//     of another request of this key (requestBadge). A transactional claim
//     wears its request's badge for as long as its transaction, which
//     holds the key's lock; a holder being given back wears none, or this
//     request's, and neither does a key that is free again by now. A
//     handler that takes this key's lock from its own request's
//     transaction wears its own request's badge, of another key: the key
//     is answered as in flight (409), never as another request's (422),
//     which would tell the client to change its key.
//
// The badge is what tells a request's lock apart from any other: the
// request lock itself is in the one-bigint space, where an application's
// own advisory lock (pg_advisory_lock(4242)) looks the same, and would
// make a retry of a request being given back look like another request
// (a 422, which tells the client to change its key). A holder that wears
// no badge (a claim outside a transaction, for the moment its call lasts;
// a process of an earlier version) is answered as in flight: a 409 whose
// retry meets the row.
//
// It reads pg_locks, which briefly locks the whole lock table, and costs a
// round trip: it runs only on this rare path, never on a claim that wins,
// replays or meets a visible row. The key's lock id is split as PostgreSQL
// shows a one-bigint advisory lock in pg_locks: classid the high half,
// objid the low half, objsubid 1; a badge, a lock of the two-int form, is
// classid badgeClass and objid the badge, objsubid 2.
const settleSQL = `SELECT k.state, k.operation, k.fingerprint,
       (extract(epoch FROM k.lease_until OPERATOR(pg_catalog.-) clock_timestamp()) OPERATOR(pg_catalog.*) 1000000)::bigint,
       k.status, k.headers, k.body, k.body_omitted,
       EXISTS (SELECT 1
                 FROM pg_catalog.pg_locks h
                 JOIN pg_catalog.pg_locks o
                   ON o.pid OPERATOR(pg_catalog.=) h.pid AND o.locktype OPERATOR(pg_catalog.=) 'advisory' AND o.granted
                  AND o.objsubid OPERATOR(pg_catalog.=) 2 AND o.database OPERATOR(pg_catalog.=) h.database
                  AND o.classid OPERATOR(pg_catalog.=) $4::bigint::pg_catalog.oid
                  AND o.objid OPERATOR(pg_catalog.<>) $5::bigint::pg_catalog.oid
                  AND (o.objid::bigint OPERATOR(pg_catalog.>>) 15) OPERATOR(pg_catalog.=) ($5::bigint OPERATOR(pg_catalog.>>) 15)
                WHERE h.locktype OPERATOR(pg_catalog.=) 'advisory' AND h.granted AND h.objsubid OPERATOR(pg_catalog.=) 1
                  AND h.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
                  AND h.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
                                                         WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                  AND h.classid OPERATOR(pg_catalog.=) l.key_hi AND h.objid OPERATOR(pg_catalog.=) l.key_lo)
  FROM (SELECT ((i.k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid AS key_hi,
               (i.k OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid AS key_lo
          FROM (SELECT idempotency_lock_id($1, $2, $3) AS k) i) l
  LEFT JOIN ONLY idempotency_keys k
    ON k.tenant OPERATOR(pg_catalog.=) $1 AND k.scope OPERATOR(pg_catalog.=) $2 AND k.key OPERATOR(pg_catalog.=) $3
   AND k.expires_at OPERATOR(pg_catalog.>) clock_timestamp()`

// badgeClass is the first key of every badge (requestBadge), in the
// two-int advisory lock space: "idmg" in ASCII.
const badgeClass int32 = 0x69646d67

// requestBadge returns the badge of c's request, the second key of an
// advisory lock in the two-int space that a transactional claim takes,
// shared and without waiting, as its transaction begins (txTimeoutsSQL),
// and holds until the transaction ends. Its high 16 of 31 bits are a hash
// of the key (tenant, scope and key), its low 15 a hash of the request's
// identity (key, operation and fingerprint), both 31-bit FNV-1a, the same
// in every process. settle counts only a badge of the key it settles: a
// session that holds the key's lock and wears the badge of a request of
// another key (a handler that took another tenant's key's lock from the
// transaction of its own request) is answered as in flight, not as
// another request of this key. Two requests of one key whose badges
// collide only make settle answer one of them 409 rather than 422 for a
// moment; a request never wears a badge other than its own.
func requestBadge(c idemstore.Claim) int32 {
	key := identityHash(c.Tenant, c.Scope, c.Key)
	request := identityHash(c.Tenant, c.Scope, c.Key, c.Operation, string(c.Fingerprint))
	return int32(key>>badgeRequestBits<<badgeRequestBits | request&(1<<badgeRequestBits-1))
}

// badgeRequestBits are the low bits of a badge that tell its request
// apart from another request of the same key (requestBadge).
const badgeRequestBits = 15

// identityHash is a 31-bit FNV-1a hash of parts, each preceded by its
// length.
func identityHash(parts ...string) uint32 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, s := range parts {
		for n, i := uint64(len(s)), 0; i < 8; i++ {
			h = (h ^ (n>>(8*i))&0xff) * prime
		}
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * prime
		}
	}
	return uint32((h ^ h>>32) & math.MaxInt32)
}

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
	err := q.QueryRow(ctx, settleSQL, c.Tenant, c.Scope, c.Key, int64(badgeClass), int64(requestBadge(c))).
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
