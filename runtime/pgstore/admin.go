package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// The operator's statements (idemadmin.Store). They run rarely and by hand,
// so they favour plain SQL over the claim path's tuning. Every time is read
// from the database clock, as leases and expiry are; statement_timestamp()
// is one instant for the whole statement. Like the outbox's, they name
// every function and operator pg_catalog's and cast every parameter: they
// run outside every check of a handler's transaction, on a session whose
// search_path may find a function or an operator of a handler's making
// that fits the arguments better than pg_catalog's (docs/semantics.md
// §7.2).

var _ idemadmin.Store = (*Store)(nil)

// adminColumns are an entry's columns without its headers and body.
const adminColumns = `tenant, scope, key, operation, fingerprint, state, lease_token,
       lease_until, expires_at, created_at, completed_at, status,
       coalesce(pg_catalog.octet_length(body), 0), body_omitted, pg_catalog.statement_timestamp()`

// Scan implements idemadmin.Store.
func (s *Store) Scan(ctx context.Context, q idemadmin.Query, fn func(idemadmin.Entry) bool) error {
	sql, args := scanSQL(q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: scan keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEntry(rows, false)
		if err != nil {
			return fmt.Errorf("pgstore: scan keys: %w", err)
		}
		if !fn(e) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: scan keys: %w", err)
	}
	return nil
}

// scanSQL is Scan's statement for q, and its arguments.
func scanSQL(q idemadmin.Query) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(q.States) > 0 {
		states := make([]string, len(q.States))
		for i, st := range q.States {
			states[i] = string(st)
		}
		where = append(where, "state OPERATOR(pg_catalog.=) ANY ("+arg(states)+"::pg_catalog.text[])")
	}
	if q.Tenant != "" {
		where = append(where, "tenant OPERATOR(pg_catalog.=) "+arg(q.Tenant)+"::pg_catalog.text")
	}
	if q.Operation != "" {
		where = append(where, "operation OPERATOR(pg_catalog.=) "+arg(q.Operation)+"::pg_catalog.text")
	}
	if q.OlderThan > 0 {
		where = append(where, "created_at OPERATOR(pg_catalog.<=) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) "+micros(arg(q.OlderThan.Microseconds()))+")")
	}
	if q.ExpiringWithin > 0 {
		where = append(where, "expires_at OPERATOR(pg_catalog.<=) (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.+) "+micros(arg(q.ExpiringWithin.Microseconds()))+")")
	}
	if !q.IncludeExpired {
		where = append(where, "expires_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()")
	}
	sql := "SELECT " + adminColumns + "\n  FROM ONLY idempotency_keys"
	if len(where) > 0 {
		sql += "\n WHERE " + strings.Join(where, "\n   AND ")
	}
	sql += "\n ORDER BY created_at, tenant, scope, key"
	if q.Limit > 0 {
		sql += "\n LIMIT " + arg(q.Limit) + "::pg_catalog.int8"
	}
	return sql, args
}

// micros is the parameter p, a number of microseconds, as an interval.
func micros(p string) string {
	return "(" + p + "::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval)"
}

// scanEntry reads one row of adminColumns, followed by the headers and
// the body when whole is set.
func scanEntry(row pgx.Row, whole bool) (idemadmin.Entry, error) {
	var (
		e                     idemadmin.Entry
		state                 string
		token                 *string
		leaseUntil, completed *time.Time
		status                *int32
		headers               []byte
	)
	dest := []any{&e.Tenant, &e.Scope, &e.Key, &e.Operation, &e.Fingerprint, &state, &token,
		&leaseUntil, &e.ExpiresAt, &e.CreatedAt, &completed, &status,
		&e.BodyBytes, &e.BodyOmitted, &e.ReadAt}
	if whole {
		dest = append(dest, &headers, &e.Body)
	}
	if err := row.Scan(dest...); err != nil {
		return idemadmin.Entry{}, err
	}
	e.State = idemstore.State(state)
	if token != nil {
		e.Token = *token
	}
	if leaseUntil != nil {
		e.LeaseUntil = *leaseUntil
	}
	if completed != nil {
		e.CompletedAt = *completed
	}
	if status != nil {
		e.Status = int(*status)
	}
	if headers != nil {
		h, err := headerwire.Decode(headers)
		if err != nil {
			return idemadmin.Entry{}, fmt.Errorf("stored headers: %w", err)
		}
		e.Header = h
	}
	return e, nil
}

// getSQL reads one key whole.
const getSQL = `SELECT ` + adminColumns + `, headers, body
  FROM ONLY idempotency_keys
 WHERE tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text AND scope OPERATOR(pg_catalog.=) $2::pg_catalog.text
   AND key OPERATOR(pg_catalog.=) $3::pg_catalog.text`

// Get implements idemadmin.Store.
func (s *Store) Get(ctx context.Context, id idemstore.Identity) (idemadmin.Entry, error) {
	e, err := scanEntry(s.pool.QueryRow(ctx, getSQL, id.Tenant, id.Scope, id.Key), true)
	if errors.Is(err, pgx.ErrNoRows) {
		return idemadmin.Entry{}, idemadmin.ErrNotFound
	}
	if err != nil {
		return idemadmin.Entry{}, fmt.Errorf("pgstore: get key: %w", err)
	}
	return e, nil
}

// settleWhere is the fence of an operator's change: the row the operator
// was shown (same state, same lease token), still live, and not a claim
// whose lease still runs. A row that changed in any of these ways matches
// nothing, and the change is refused as ErrChanged. The token's match
// is spelt out rather than IS NOT DISTINCT FROM, which finds its = by the
// search_path.
const settleWhere = `
 WHERE tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text AND scope OPERATOR(pg_catalog.=) $2::pg_catalog.text
   AND key OPERATOR(pg_catalog.=) $3::pg_catalog.text AND state OPERATOR(pg_catalog.=) $4::pg_catalog.text
   AND (lease_token OPERATOR(pg_catalog.=) $5::pg_catalog.text OR (lease_token IS NULL AND $5::pg_catalog.text IS NULL))
   AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
   AND (state OPERATOR(pg_catalog.<>) 'in_flight' OR lease_until OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())`

// resolveSQL completes an outcome-unknown key with the operator's
// response. The lease token stays: a late completion from the request
// that was abandoned still finds the row no longer in flight and is fenced.
const resolveSQL = `UPDATE ONLY idempotency_keys
   SET state = 'completed', completed_at = pg_catalog.clock_timestamp(), lease_until = NULL,
       status = $6::pg_catalog.int4, headers = $7::pg_catalog.bytea, body = $8::pg_catalog.bytea, body_omitted = false` + settleWhere

// forgetSQL deletes an outcome-unknown key, so the next retry runs.
const forgetSQL = `DELETE FROM ONLY idempotency_keys` + settleWhere

// Settle implements idemadmin.Store.
func (s *Store) Settle(ctx context.Context, seen idemadmin.Entry, resp *idemstore.Response) error {
	var token *string
	if seen.Token != "" {
		token = &seen.Token
	}
	args := []any{seen.Tenant, seen.Scope, seen.Key, string(seen.State), token}
	sql := forgetSQL
	if resp != nil {
		headers := headerwire.Encode(resp.Header)
		body := resp.Body
		if body == nil {
			body = []byte{}
		}
		args = append(args, int32(resp.Status), headers, body)
		sql = resolveSQL
	}
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: settle key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return idemadmin.ErrChanged
	}
	return nil
}

// statsSQL counts live keys by operation and state; the last row, with
// NULL operation and state, counts the expired rows left for the sweeper.
const statsSQL = `SELECT operation, state, pg_catalog.count(*), pg_catalog.statement_timestamp()
  FROM ONLY idempotency_keys
 WHERE expires_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()
 GROUP BY operation, state
UNION ALL
SELECT NULL, NULL, pg_catalog.count(*), pg_catalog.statement_timestamp()
  FROM ONLY idempotency_keys
 WHERE expires_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()
 ORDER BY 1, 2`

// Stats implements idemadmin.Store.
func (s *Store) Stats(ctx context.Context) (idemadmin.Stats, error) {
	rows, err := s.pool.Query(ctx, statsSQL)
	if err != nil {
		return idemadmin.Stats{}, fmt.Errorf("pgstore: stats: %w", err)
	}
	defer rows.Close()
	var st idemadmin.Stats
	for rows.Next() {
		var (
			op, state *string
			n         int64
		)
		if err := rows.Scan(&op, &state, &n, &st.ReadAt); err != nil {
			return idemadmin.Stats{}, fmt.Errorf("pgstore: stats: %w", err)
		}
		if op == nil {
			st.Expired = n
			continue
		}
		st.Counts = append(st.Counts, idemadmin.Count{Operation: *op, State: idemstore.State(*state), Keys: n})
	}
	if err := rows.Err(); err != nil {
		return idemadmin.Stats{}, fmt.Errorf("pgstore: stats: %w", err)
	}
	return st, nil
}
