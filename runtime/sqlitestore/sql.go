package sqlitestore

// The SQL of the store, in one place. Every statement names the row by its
// primary key (tenant, scope, key); the ones that change a held claim also
// carry the lease token and state, which is the fencing: a request that no
// longer holds the current token matches no row and changes nothing.

// selectRow reads a key for the claim's decision. Run outside a
// transaction it reads the latest committed state without waiting for the
// writer (WAL); run after BEGIN IMMEDIATE it reads a state no one else can
// change until COMMIT.
const selectRow = `
SELECT operation, fingerprint, state, lease_token, lease_until, fail_closed,
       expires_at, status, headers, body, body_omitted
  FROM main.idempotency_keys
 WHERE tenant = ? AND scope = ? AND key = ?`

// upsertClaim inserts a new in-flight row or replaces an expired one. It
// runs only under the write lock, after a read that found the key absent or
// expired, so the conflict branch overwrites exactly that expired row.
const upsertClaim = `
INSERT INTO main.idempotency_keys
       (tenant, scope, key, operation, fingerprint, state,
        lease_token, lease_until, fail_closed, expires_at, created_at)
VALUES (?, ?, ?, ?, ?, 'in_flight', ?, ?, ?, ?, ?)
ON CONFLICT (tenant, scope, key) DO UPDATE
   SET operation    = excluded.operation,
       fingerprint  = excluded.fingerprint,
       state        = 'in_flight',
       lease_token  = excluded.lease_token,
       lease_until  = excluded.lease_until,
       fail_closed  = excluded.fail_closed,
       expires_at   = excluded.expires_at,
       created_at   = excluded.created_at,
       completed_at = NULL,
       status       = NULL,
       headers      = NULL,
       body         = NULL,
       body_omitted = 0`

// takeOver hands an abandoned claim to a new token. expires_at is left
// alone, since a key lives ttl from its first claim, not from its latest
// holder, unless the new lease would outlive it: an in-flight row with a
// running lease is never absent, or a new claim would win while the new
// holder still runs.
const takeOver = `
UPDATE main.idempotency_keys
   SET lease_token = ?1, lease_until = ?2, expires_at = max(expires_at, ?2)
 WHERE tenant = ?3 AND scope = ?4 AND key = ?5`

// failClosed marks an abandoned claim indeterminate for an operator.
const failClosed = `
UPDATE main.idempotency_keys
   SET state = 'indeterminate', lease_until = NULL
 WHERE tenant = ? AND scope = ? AND key = ?`

// complete stores the response of the claim held with the token. The same
// statement serves Store.Complete and, inside the handler's transaction,
// Tx.Commit.
const complete = `
UPDATE main.idempotency_keys
   SET state = 'completed', status = ?, headers = ?, body = ?,
       body_omitted = ?, completed_at = ?, lease_until = NULL
 WHERE tenant = ? AND scope = ? AND key = ?
   AND lease_token = ? AND state = 'in_flight'`

// holdClaim changes nothing; run first in a handler's transaction, it takes
// SQLite's write lock at once, whatever the database's default BEGIN mode,
// and proves the claim is still held when the handler starts.
const holdClaim = `
UPDATE main.idempotency_keys
   SET lease_token = lease_token
 WHERE tenant = ? AND scope = ? AND key = ?
   AND lease_token = ? AND state = 'in_flight'`

// release deletes the claim held with the token.
const release = `
DELETE FROM main.idempotency_keys
 WHERE tenant = ? AND scope = ? AND key = ?
   AND lease_token = ? AND state = 'in_flight'`

// abandonTakeover ends the lease of the claim held with the token, so that
// the next claim of the same request takes it over.
const abandonTakeover = `
UPDATE main.idempotency_keys
   SET lease_until = ?
 WHERE tenant = ? AND scope = ? AND key = ?
   AND lease_token = ? AND state = 'in_flight'`

// abandonFailClosed marks the claim held with the token indeterminate.
const abandonFailClosed = `
UPDATE main.idempotency_keys
   SET state = 'indeterminate', lease_until = NULL
 WHERE tenant = ? AND scope = ? AND key = ?
   AND lease_token = ? AND state = 'in_flight'`

// sweep deletes a bounded batch of expired rows, found through the
// expires_at index, so that the write lock is held only briefly. A row in
// flight under a running lease is never swept, whatever its expiry.
const sweep = `
DELETE FROM main.idempotency_keys
 WHERE rowid IN (SELECT rowid FROM main.idempotency_keys
                  WHERE expires_at <= ?1
                    AND NOT (state = 'in_flight' AND lease_until > ?1)
                  LIMIT ?2)`

// countKeysTable tells whether the table exists yet: a store may be opened
// before its migration is applied.
const countKeysTable = `
SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = 'idempotency_keys'`

// endLeases ends, at ?1, the lease of every claim in flight whose lease
// still runs. It is run only by a store that holds the owner lock
// exclusively, when every holder is known to be gone (owner.go). One pass
// over the table, once, when a store opens.
const endLeases = `
UPDATE main.idempotency_keys
   SET lease_until = ?1
 WHERE state = 'in_flight' AND lease_until > ?1`
