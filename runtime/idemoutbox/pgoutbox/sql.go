package pgoutbox

// Every statement pgoutbox sends is here; the table is in templates/sql/postgres.outbox.up.sql.
// Durations travel as
// microseconds, so that leases and backoff are measured by the database
// clock, never by the application's.

// stageSQL writes a staged effect in the handler's transaction. The
// conflict target is the partial unique index of pending effects: a second
// staging of one effect key inserts nothing, and the caller says so,
// rather than raise an error that would abort the handler's transaction.
// %s is the table, named by its schema (Outbox.stageStatement); every
// parameter is cast, so that the handler's session chooses no type.
const stageSQL = `INSERT INTO %s (tenant, scope, key, effect_key, name, payload)
VALUES ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.bytea)
ON CONFLICT (tenant, effect_key) WHERE state = 'pending' DO NOTHING`

// tableSchemaSQL finds the schema of the outbox's table as the session
// resolves its name.
const tableSchemaSQL = `SELECT n.nspname FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
 WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('idempotency_outbox')`

// claimSQL leases up to $1 due effects to the claim $3 for $2 µs. SKIP
// LOCKED passes over rows another runner is claiming at this moment, so
// runners never wait on each other. The lease is also the next attempt
// time: a leased row is not due, and the due index holds only what a
// runner may take; a killed runner's row is due again when its lease
// ends. The attempt is counted here, before the delivery, so that an
// effect whose delivery kills its runner every time still ends dead.
const claimSQL = `WITH due AS (
    SELECT id FROM idempotency_outbox
     WHERE state = 'pending' AND next_attempt_at <= clock_timestamp()
     ORDER BY next_attempt_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE idempotency_outbox o
   SET leased_until    = clock_timestamp() + $2 * interval '1 microsecond',
       next_attempt_at = clock_timestamp() + $2 * interval '1 microsecond',
       lease_token     = $3,
       attempts        = o.attempts + 1
  FROM due
 WHERE o.id = due.id
RETURNING ` + columns

// columns are the columns of a Message, in scan's order.
const columns = `o.id, o.tenant, o.scope, o.key, o.effect_key, o.name, o.payload, o.state,
       o.attempts, o.next_attempt_at, o.leased_until, coalesce(o.last_error, ''), o.created_at, o.delivered_at`

// deliveredSQL records a delivery, whoever holds the row now and whatever
// its state: the receiver has the effect, so a row another runner made
// dead after this one's lease ran out is delivered too. A second record
// keeps the first time.
const deliveredSQL = `UPDATE idempotency_outbox
   SET state = 'delivered', delivered_at = coalesce(delivered_at, clock_timestamp()),
       leased_until = NULL, lease_token = NULL
 WHERE id = $1
RETURNING (extract(epoch FROM delivered_at - created_at) * 1000000)::bigint`

// failedSQL records a failed attempt of the claim $5: due again in $3 µs,
// or dead. A claim that lost its lease to another runner changes nothing.
const failedSQL = `UPDATE idempotency_outbox
   SET state = CASE WHEN $4 THEN 'dead' ELSE 'pending' END,
       next_attempt_at = clock_timestamp() + $3 * interval '1 microsecond',
       leased_until = NULL, lease_token = NULL, last_error = $2
 WHERE id = $1 AND lease_token = $5 AND state = 'pending'`

// releaseSQL gives back an effect claimed under $2 and never begun.
const releaseSQL = `UPDATE idempotency_outbox
   SET next_attempt_at = clock_timestamp(), leased_until = NULL, lease_token = NULL,
       attempts = attempts - 1
 WHERE id = $1 AND lease_token = $2 AND state = 'pending'`

// pruneSQL deletes up to $2 effects delivered at least $1 µs ago. SKIP
// LOCKED passes over rows another runner is deleting.
const pruneSQL = `DELETE FROM idempotency_outbox o
 USING (SELECT id FROM idempotency_outbox
         WHERE state = 'delivered' AND delivered_at <= clock_timestamp() - $1 * interval '1 microsecond'
         ORDER BY delivered_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED) d
 WHERE o.id = d.id`

// backlogSQL counts what is not delivered, through the index of
// undelivered effects.
const backlogSQL = `SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'dead'),
       coalesce((extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE state = 'pending')) * 1000000)::bigint, 0)
  FROM idempotency_outbox
 WHERE state <> 'delivered'`

// redriveSQL makes a dead effect pending again. The partial unique index
// refuses it when a pending effect has its effect key.
const redriveSQL = `UPDATE idempotency_outbox
   SET state = 'pending', attempts = 0, next_attempt_at = clock_timestamp(),
       leased_until = NULL, lease_token = NULL
 WHERE id = $1 AND state = 'dead'`

// listSQL selects effects by request and state; an empty argument
// selects everything, and $5 = 0 means no limit. A key is matched in its
// scope exactly, ” (a tenant-wide key) included.
const listSQL = `SELECT ` + columns + `
  FROM idempotency_outbox o
 WHERE ($1 = '' OR o.tenant = $1) AND ($3 = '' OR (o.key = $3 AND o.scope = $2))
   AND ($6 = 0 OR o.id = $6)
   AND (cardinality($4::text[]) = 0 OR o.state = ANY($4))
 ORDER BY o.id
 LIMIT nullif($5, 0)`
