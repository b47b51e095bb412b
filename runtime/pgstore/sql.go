package pgstore

// Every statement pgstore sends is here. The decisions themselves live in
// the functions of the migration (templates/sql/postgres.up.sql), which
// explains why the claim is a plpgsql function and not a statement.

// claimSQL runs the atomic claim in one round trip. Durations travel as
// microseconds so that the lease and expiry are measured by the database
// clock, never by the application's.
//
// The first branch is the fast path for a row that already decides the
// claim: a live row of another request (mismatch), or one that is
// completed, indeterminate, or in flight with its lease running. That is a
// plain read on the statement's snapshot, exactly the decision
// idempotency_claim would reach from its own first SELECT, without the
// cost of a plpgsql call and its per-statement executor start (measured at
// about half of a primary-key lookup's round trip). Replays and conflicts,
// the retries of a busy API, take this path.
//
// Everything else (no row, an expired row, an abandoned claim) goes to
// idempotency_claim, whose comment explains the atomic claim. "decided" is
// materialized once and the NOT EXISTS is an uncorrelated one-time filter,
// so the function runs only when the fast path found nothing.
const claimSQL = `WITH cur AS MATERIALIZED (
    SELECT k.state, k.operation, k.fingerprint, k.lease_until, k.status,
           k.headers, k.body, k.body_omitted, k.expires_at, clock_timestamp() AS now
      FROM idempotency_keys k
     WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
), decided AS MATERIALIZED (
    SELECT CASE WHEN c.fingerprint <> $5 OR c.operation <> $4
                THEN 'mismatch' ELSE 'lost' END AS outcome,
           c.*
      FROM cur c
     WHERE c.expires_at > c.now
       AND (c.fingerprint <> $5 OR c.operation <> $4
            OR c.state <> 'in_flight' OR c.lease_until > c.now)
)
SELECT d.outcome, d.state, d.operation, d.fingerprint,
       CASE WHEN d.state = 'in_flight'
            THEN greatest(0, (extract(epoch FROM d.lease_until - d.now) * 1000000)::bigint)
       END,
       d.status, d.headers, d.body, d.body_omitted
  FROM decided d
UNION ALL
SELECT r_outcome, r_state, r_operation, r_fingerprint, r_lease_remaining_us,
       r_status, r_headers, r_body, r_body_omitted
  FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8, $9)
 WHERE NOT EXISTS (SELECT 1 FROM decided)`

// completeSQL goes through the same function in both modes: outside a
// transaction its SQLSTATE IK001 is ErrFenced; inside one it also aborts the
// transaction, which is what lets Tx.Commit queue COMMIT right behind it.
const completeSQL = `SELECT idempotency_complete($1, $2, $3, $4, $5, $6, $7, $8)`

// releaseSQL deletes the row only for the current token of an in-flight
// claim: a late release from an abandoned request deletes nothing.
const releaseSQL = `DELETE FROM idempotency_keys
 WHERE tenant = $1 AND scope = $2 AND key = $3
   AND lease_token = $4 AND state = 'in_flight'`

// abandonTakeoverSQL ends the lease now, so the next claim of the same
// request takes the key over at once. Token-checked like every write.
const abandonTakeoverSQL = `UPDATE idempotency_keys
   SET lease_until = clock_timestamp()
 WHERE tenant = $1 AND scope = $2 AND key = $3
   AND lease_token = $4 AND state = 'in_flight'`

// abandonFailClosedSQL marks the key indeterminate for an operator to
// resolve.
const abandonFailClosedSQL = `UPDATE idempotency_keys
   SET state = 'indeterminate'
 WHERE tenant = $1 AND scope = $2 AND key = $3
   AND lease_token = $4 AND state = 'in_flight'`

// sweepSQL deletes a bounded batch of expired rows, skipping locked ones.
const sweepSQL = `SELECT idempotency_sweep($1)`

// txTimeoutsSQL bounds a hung transactional handler by the lease: the
// database itself ends a session that sits idle in the transaction, or runs
// one statement, for longer than the lease. SET LOCAL (is_local = true) ends
// with the transaction, so the pooled connection comes back clean.
const txTimeoutsSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true),
       set_config('statement_timeout', $1, true)`

const (
	commitSQL   = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// migrateLockSQL serializes concurrent Migrate calls (several replicas or
// test processes starting at once): CREATE ... IF NOT EXISTS and CREATE OR
// REPLACE FUNCTION are not safe against each other without it. The number is
// arbitrary and fixed.
const migrateLockSQL = `SELECT pg_advisory_xact_lock(7236194020345570123)`

// sqlstateFenced is the SQLSTATE idempotency_complete raises when the lease
// token is no longer current.
const sqlstateFenced = "IK001"
