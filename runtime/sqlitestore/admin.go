package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// The operator's statements (idemadmin.Store). Times are the store's
// clock in unix milliseconds, read once per call and passed in, as the
// claim does.

var _ idemadmin.Store = (*Store)(nil)

// adminColumns are an entry's columns without its headers and body.
const adminColumns = `tenant, scope, key, operation, fingerprint, state, lease_token,
       lease_until, expires_at, created_at, completed_at, status,
       coalesce(length(body), 0), body_omitted`

// Scan implements idemadmin.Store.
func (s *Store) Scan(ctx context.Context, q idemadmin.Query, fn func(idemadmin.Entry) bool) error {
	now := s.now()
	var (
		where []string
		args  []any
	)
	if len(q.States) > 0 {
		marks := make([]string, len(q.States))
		for i, st := range q.States {
			marks[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "state IN ("+strings.Join(marks, ", ")+")")
	}
	if q.Tenant != "" {
		where = append(where, "tenant = ?")
		args = append(args, q.Tenant)
	}
	if q.Operation != "" {
		where = append(where, "operation = ?")
		args = append(args, q.Operation)
	}
	if q.OlderThan > 0 {
		where = append(where, "created_at <= ?")
		args = append(args, millis(now.Add(-q.OlderThan)))
	}
	if q.ExpiringWithin > 0 {
		where = append(where, "expires_at <= ?")
		args = append(args, millis(now.Add(q.ExpiringWithin)))
	}
	if !q.IncludeExpired {
		where = append(where, "expires_at > ?")
		args = append(args, millis(now))
	}
	query := "SELECT " + adminColumns + "\n  FROM main.idempotency_keys"
	if len(where) > 0 {
		query += "\n WHERE " + strings.Join(where, "\n   AND ")
	}
	query += "\n ORDER BY created_at, tenant, scope, key"
	if q.Limit > 0 {
		query += "\n LIMIT ?"
		args = append(args, q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("sqlitestore: scan keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEntry(rows, now, false)
		if err != nil {
			return fmt.Errorf("sqlitestore: scan keys: %w", err)
		}
		if !fn(e) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlitestore: scan keys: %w", err)
	}
	return nil
}

// scanEntry reads one row of adminColumns, followed by the headers and the
// body when whole is set.
func scanEntry(row interface{ Scan(...any) error }, now time.Time, whole bool) (idemadmin.Entry, error) {
	var (
		e                             idemadmin.Entry
		state                         string
		token                         sql.NullString
		headers                       []byte
		leaseUntil, completed, status sql.NullInt64
		expires, created              int64
	)
	dest := []any{&e.Tenant, &e.Scope, &e.Key, &e.Operation, &e.Fingerprint, &state, &token,
		&leaseUntil, &expires, &created, &completed, &status, &e.BodyBytes, &e.BodyOmitted}
	if whole {
		dest = append(dest, &headers, &e.Body)
	}
	if err := row.Scan(dest...); err != nil {
		return idemadmin.Entry{}, err
	}
	e.State, e.Token, e.ReadAt = idemstore.State(state), token.String, now
	e.ExpiresAt, e.CreatedAt = time.UnixMilli(expires), time.UnixMilli(created)
	if leaseUntil.Valid {
		e.LeaseUntil = time.UnixMilli(leaseUntil.Int64)
	}
	if completed.Valid {
		e.CompletedAt = time.UnixMilli(completed.Int64)
	}
	e.Status = int(status.Int64)
	if headers != nil {
		h, err := headerwire.Decode(headers)
		if err != nil {
			return idemadmin.Entry{}, fmt.Errorf("stored headers: %w", err)
		}
		e.Header = h
	}
	return e, nil
}

// getKey reads one key whole.
const getKey = `SELECT ` + adminColumns + `, headers, body
  FROM main.idempotency_keys
 WHERE tenant = ? AND scope = ? AND key = ?`

// Get implements idemadmin.Store.
func (s *Store) Get(ctx context.Context, id idemstore.Identity) (idemadmin.Entry, error) {
	e, err := scanEntry(s.db.QueryRowContext(ctx, getKey, id.Tenant, id.Scope, id.Key), s.now(), true)
	if errors.Is(err, sql.ErrNoRows) {
		return idemadmin.Entry{}, idemadmin.ErrNotFound
	}
	if err != nil {
		return idemadmin.Entry{}, fmt.Errorf("sqlitestore: get key: %w", err)
	}
	return e, nil
}

// settleWhere is the fence of an operator's change: the row the operator
// was shown (same state, same lease token), still live, and not a claim
// whose lease still runs. A row that changed in any of these ways matches
// nothing, and the change is refused as ErrChanged. Numbered parameters:
// ?1..?3 the key, ?4 the state, ?5 the token, ?6 the store's clock.
const settleWhere = `
 WHERE tenant = ?1 AND scope = ?2 AND key = ?3
   AND state = ?4 AND lease_token IS ?5
   AND expires_at > ?6
   AND (state <> 'in_flight' OR lease_until <= ?6)`

// resolveKey completes an outcome-unknown key with the operator's
// response. The lease token stays: a late completion from the request that
// was abandoned still finds the row no longer in flight and is fenced.
const resolveKey = `UPDATE main.idempotency_keys
   SET state = 'completed', completed_at = ?6, lease_until = NULL,
       status = ?7, headers = ?8, body = ?9, body_omitted = 0` + settleWhere

// forgetKey deletes an outcome-unknown key, so the next retry runs.
const forgetKey = `DELETE FROM main.idempotency_keys` + settleWhere

// Settle implements idemadmin.Store. It writes under the store's write
// turn, like a completion.
func (s *Store) Settle(ctx context.Context, seen idemadmin.Entry, resp *idemstore.Response) error {
	token := sql.NullString{String: seen.Token, Valid: seen.Token != ""}
	args := []any{seen.Tenant, seen.Scope, seen.Key, string(seen.State), token, millis(s.now())}
	query := forgetKey
	if resp != nil {
		body := resp.Body
		if body == nil {
			body = []byte{}
		}
		args = append(args, resp.Status, headerwire.Encode(resp.Header), body)
		query = resolveKey
	}
	err := s.write(ctx, func(e execer) error { return fenced(e.ExecContext(ctx, query, args...)) })
	if errors.Is(err, idemstore.ErrFenced) {
		return idemadmin.ErrChanged
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: settle key: %w", err)
	}
	return nil
}

// keyStats counts live keys by operation and state (?1 is the store's
// clock); the last row, with NULL operation and state, counts the expired
// rows left for the sweeper.
const keyStats = `SELECT operation, state, count(*)
  FROM main.idempotency_keys
 WHERE expires_at > ?1
 GROUP BY operation, state
UNION ALL
SELECT NULL, NULL, count(*)
  FROM main.idempotency_keys
 WHERE expires_at <= ?1
 ORDER BY 1 NULLS LAST, 2`

// Stats implements idemadmin.Store.
func (s *Store) Stats(ctx context.Context) (idemadmin.Stats, error) {
	st := idemadmin.Stats{ReadAt: s.now()}
	rows, err := s.db.QueryContext(ctx, keyStats, millis(st.ReadAt))
	if err != nil {
		return idemadmin.Stats{}, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			op, state sql.NullString
			n         int64
		)
		if err := rows.Scan(&op, &state, &n); err != nil {
			return idemadmin.Stats{}, fmt.Errorf("sqlitestore: stats: %w", err)
		}
		if !op.Valid {
			st.Expired = n
			continue
		}
		st.Counts = append(st.Counts, idemadmin.Count{Operation: op.String, State: idemstore.State(state.String), Keys: n})
	}
	if err := rows.Err(); err != nil {
		return idemadmin.Stats{}, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	return st, nil
}
