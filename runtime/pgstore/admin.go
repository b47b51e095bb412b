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
// is one instant for the whole statement.

var _ idemadmin.Store = (*Store)(nil)

// adminColumns are an entry's columns without its headers and body.
const adminColumns = `tenant, scope, key, operation, fingerprint, state, lease_token,
       lease_until, expires_at, created_at, completed_at, status,
       coalesce(octet_length(body), 0), body_omitted, statement_timestamp()`

// Scan implements idemadmin.Store.
func (s *Store) Scan(ctx context.Context, q idemadmin.Query, fn func(idemadmin.Entry) bool) error {
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
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if q.Tenant != "" {
		where = append(where, "tenant = "+arg(q.Tenant))
	}
	if q.Operation != "" {
		where = append(where, "operation = "+arg(q.Operation))
	}
	if q.OlderThan > 0 {
		where = append(where, "created_at <= statement_timestamp() - "+arg(q.OlderThan.Microseconds())+" * interval '1 microsecond'")
	}
	if q.ExpiringWithin > 0 {
		where = append(where, "expires_at <= statement_timestamp() + "+arg(q.ExpiringWithin.Microseconds())+" * interval '1 microsecond'")
	}
	if !q.IncludeExpired {
		where = append(where, "expires_at > statement_timestamp()")
	}
	sql := "SELECT " + adminColumns + "\n  FROM idempotency_keys"
	if len(where) > 0 {
		sql += "\n WHERE " + strings.Join(where, "\n   AND ")
	}
	sql += "\n ORDER BY created_at, tenant, scope, key"
	if q.Limit > 0 {
		sql += "\n LIMIT " + arg(q.Limit)
	}
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
  FROM idempotency_keys
 WHERE tenant = $1 AND scope = $2 AND key = $3`

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
// nothing, and the change is refused as ErrChanged.
const settleWhere = `
 WHERE tenant = $1 AND scope = $2 AND key = $3
   AND state = $4 AND lease_token IS NOT DISTINCT FROM $5
   AND expires_at > clock_timestamp()
   AND (state <> 'in_flight' OR lease_until <= clock_timestamp())`

// resolveSQL completes an outcome-unknown key with the operator's
// response. The lease token stays: a late completion from the request
// that was abandoned still finds the row no longer in flight and is fenced.
const resolveSQL = `UPDATE idempotency_keys
   SET state = 'completed', completed_at = clock_timestamp(), lease_until = NULL,
       status = $6, headers = $7, body = $8, body_omitted = false` + settleWhere

// forgetSQL deletes an outcome-unknown key, so the next retry runs.
const forgetSQL = `DELETE FROM idempotency_keys` + settleWhere

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
const statsSQL = `SELECT operation, state, count(*), statement_timestamp()
  FROM idempotency_keys
 WHERE expires_at > statement_timestamp()
 GROUP BY operation, state
UNION ALL
SELECT NULL, NULL, count(*), statement_timestamp()
  FROM idempotency_keys
 WHERE expires_at <= statement_timestamp()
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
