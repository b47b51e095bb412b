package sqliteoutbox

// Every statement sqliteoutbox sends is here but Stage's, which is
// sqlitestore's (StageEffect); the table is in templates/sql/sqlite.outbox.up.sql.
// Times are unix milliseconds of
// the outbox's clock, sent by the application. Each write is one
// statement under SQLite's single write lock, so two runners, in one
// process or two, never claim one row under a running lease.

// columns are the columns of a Message, in scan's order.
const columns = `id, tenant, scope, key, effect_key, name, payload, state,
       attempts, next_attempt_at, leased_until, coalesce(last_error, ''), created_at, delivered_at`

// claimSQL leases up to ?4 effects due at ?3 to the claim ?2 until ?1,
// which is also their next attempt time (see pgoutbox's claimSQL), and
// counts an attempt on each.
const claimSQL = `UPDATE main.idempotency_outbox
   SET leased_until = ?1, next_attempt_at = ?1, lease_token = ?2, attempts = attempts + 1
 WHERE id IN (SELECT id FROM main.idempotency_outbox
               WHERE state = 'pending' AND next_attempt_at <= ?3
               ORDER BY next_attempt_at LIMIT ?4)
RETURNING ` + columns

// deliveredSQL records a delivery at ?2, whoever holds the row now and
// whatever its state (see pgoutbox).
const deliveredSQL = `UPDATE main.idempotency_outbox
   SET state = 'delivered', delivered_at = coalesce(delivered_at, ?2),
       leased_until = NULL, lease_token = NULL
 WHERE id = ?1
RETURNING delivered_at - created_at`

// failedSQL records a failed attempt of the claim ?5: due again at ?3,
// or dead when ?4 is 1.
const failedSQL = `UPDATE main.idempotency_outbox
   SET state = CASE WHEN ?4 THEN 'dead' ELSE 'pending' END,
       next_attempt_at = ?3, leased_until = NULL, lease_token = NULL, last_error = ?2
 WHERE id = ?1 AND lease_token = ?5 AND state = 'pending'`

// releaseSQL gives back an effect claimed under ?2 and never begun.
const releaseSQL = `UPDATE main.idempotency_outbox
   SET next_attempt_at = ?3, leased_until = NULL, lease_token = NULL, attempts = attempts - 1
 WHERE id = ?1 AND lease_token = ?2 AND state = 'pending'`

// pruneSQL deletes up to ?2 effects delivered at or before ?1.
const pruneSQL = `DELETE FROM main.idempotency_outbox
 WHERE id IN (SELECT id FROM main.idempotency_outbox
               WHERE state = 'delivered' AND delivered_at <= ?1
               ORDER BY delivered_at LIMIT ?2)`

// backlogSQL counts what is not delivered, and the staging time of the
// oldest pending effect (NULL when none is).
const backlogSQL = `SELECT coalesce(sum(state = 'pending'), 0), coalesce(sum(state = 'dead'), 0),
       min(CASE WHEN state = 'pending' THEN created_at END)
  FROM main.idempotency_outbox
 WHERE state <> 'delivered'`

// redriveSQL makes a dead effect pending again at ?2.
const redriveSQL = `UPDATE main.idempotency_outbox
   SET state = 'pending', attempts = 0, next_attempt_at = ?2, leased_until = NULL, lease_token = NULL
 WHERE id = ?1 AND state = 'dead'`

// listSQL selects effects by request; the states are filtered by the
// caller, and so is the limit.
const listSQL = `SELECT ` + columns + `
  FROM main.idempotency_outbox
 WHERE (?1 = '' OR tenant = ?1) AND (?3 = '' OR (key = ?3 AND scope = ?2))
   AND (?4 = 0 OR id = ?4)
 ORDER BY id`
