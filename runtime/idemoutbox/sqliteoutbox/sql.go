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

// identitySQL fences a runner's record of a row it claimed to that row:
// the id ?1 under the identity it was claimed with, the request's key
// (?2 to ?4, tenant, scope and key) and its effect key (?5). SQLite gives
// the largest rowid again once its row is deleted, so a pruned row's id
// may be a new effect's by the time a late record of its delivery comes
// (see pgoutbox's identitySQL).
const identitySQL = `id = ?1 AND tenant = ?2 AND scope = ?3 AND key = ?4 AND effect_key = ?5`

// deliveredSQL records a delivery at ?6, whoever holds the row now and
// whatever its state (see pgoutbox), fenced on the row's identity.
const deliveredSQL = `UPDATE main.idempotency_outbox
   SET state = 'delivered', delivered_at = coalesce(delivered_at, ?6),
       leased_until = NULL, lease_token = NULL
 WHERE ` + identitySQL + `
RETURNING delivered_at - created_at`

// failedSQL records a failed attempt of the claim ?9, with the reason
// ?6: due again at ?7, or dead when ?8 is 1. It is fenced on the row's
// identity too.
const failedSQL = `UPDATE main.idempotency_outbox
   SET state = CASE WHEN ?8 THEN 'dead' ELSE 'pending' END,
       next_attempt_at = ?7, leased_until = NULL, lease_token = NULL, last_error = ?6
 WHERE ` + identitySQL + ` AND lease_token = ?9 AND state = 'pending'`

// releaseSQL gives back, due at ?7, an effect claimed under ?6 and never
// begun, fenced on the row's identity.
const releaseSQL = `UPDATE main.idempotency_outbox
   SET next_attempt_at = ?7, leased_until = NULL, lease_token = NULL, attempts = attempts - 1
 WHERE ` + identitySQL + ` AND lease_token = ?6 AND state = 'pending'`

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
