package pgoutbox

// Every statement pgoutbox sends is here; the table is in templates/sql/postgres.outbox.up.sql.
// Durations travel as
// microseconds, so that leases and backoff are measured by the database
// clock, never by the application's.
//
// Every function and operator is pg_catalog's by name, and every
// parameter is cast: the runners', the operator's and the sweeps'
// statements run on sessions whose search_path may find a function or an
// operator of a handler's making, in a schema its role owns, that fits
// the arguments better than pg_catalog's (a cardinality(text[]) beside
// pg_catalog's of anyarray), and would run it outside every check of a
// handler's transaction (docs/semantics.md §7.2). OPERATOR(...) binds
// tighter than a comparison but as loosely as any other operator, hence
// the parentheses around products and sums. TestStatementsNamePgCatalog
// holds every statement here to it.

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
    SELECT id FROM ONLY idempotency_outbox
     WHERE state OPERATOR(pg_catalog.=) 'pending' AND next_attempt_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
     ORDER BY next_attempt_at
     LIMIT $1::pg_catalog.int8
       FOR UPDATE SKIP LOCKED
)
UPDATE ONLY idempotency_outbox o
   SET leased_until    = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (` + microsSQL + `),
       next_attempt_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) (` + microsSQL + `),
       lease_token     = $3::pg_catalog.text,
       attempts        = o.attempts OPERATOR(pg_catalog.+) 1
  FROM due
 WHERE o.id OPERATOR(pg_catalog.=) due.id
RETURNING ` + columns

// microsSQL is $2 microseconds as an interval.
const microsSQL = `$2::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval`

// columns are the columns of a Message, in scan's order.
const columns = `o.id, o.tenant, o.scope, o.key, o.effect_key, o.name, o.payload, o.state,
       o.attempts, o.next_attempt_at, o.leased_until, coalesce(o.last_error, ''), o.created_at, o.delivered_at`

// identitySQL fences a runner's record of a row it claimed to that row:
// the id of $1 under the identity it was claimed with, the request's key
// ($2 to $4, tenant, scope and key) and its effect key ($5). An id alone
// names a row only as long as the id's sequence never goes back, and a
// handler that can set it (setval, which no rollback undoes) would have
// a runner's late record of a pruned row's delivery mark delivered, and
// never sent, another tenant's effect staged under the same id
// (docs/semantics.md §8.3). With the identity, the row a late record may
// still reach is one of the same effect key of the same request's key:
// one its receiver has.
const identitySQL = `id OPERATOR(pg_catalog.=) $1::pg_catalog.int8
   AND tenant OPERATOR(pg_catalog.=) $2::pg_catalog.text AND scope OPERATOR(pg_catalog.=) $3::pg_catalog.text
   AND key OPERATOR(pg_catalog.=) $4::pg_catalog.text AND effect_key OPERATOR(pg_catalog.=) $5::pg_catalog.text`

// deliveredSQL records a delivery, whoever holds the row now and whatever
// its state: the receiver has the effect, so a row another runner made
// dead after this one's lease ran out is delivered too. A second record
// keeps the first time. It is fenced on the row's identity (identitySQL).
const deliveredSQL = `UPDATE ONLY idempotency_outbox
   SET state = 'delivered', delivered_at = coalesce(delivered_at, pg_catalog.clock_timestamp()),
       leased_until = NULL, lease_token = NULL
 WHERE ` + identitySQL + `
RETURNING (extract(epoch FROM delivered_at OPERATOR(pg_catalog.-) created_at) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8`

// failedSQL records a failed attempt of the claim $9: due again in $7 µs,
// or dead ($8), with the reason $6. A claim that lost its lease to
// another runner changes nothing; it is fenced on the row's identity too
// (identitySQL).
const failedSQL = `UPDATE ONLY idempotency_outbox
   SET state = CASE WHEN $8::pg_catalog.bool THEN 'dead' ELSE 'pending' END,
       next_attempt_at = pg_catalog.clock_timestamp()
                         OPERATOR(pg_catalog.+) ($7::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval),
       leased_until = NULL, lease_token = NULL, last_error = $6::pg_catalog.text
 WHERE ` + identitySQL + `
   AND lease_token OPERATOR(pg_catalog.=) $9::pg_catalog.text AND state OPERATOR(pg_catalog.=) 'pending'`

// releaseSQL gives back an effect claimed under $6 and never begun,
// fenced on the row's identity (identitySQL).
const releaseSQL = `UPDATE ONLY idempotency_outbox
   SET next_attempt_at = pg_catalog.clock_timestamp(), leased_until = NULL, lease_token = NULL,
       attempts = attempts OPERATOR(pg_catalog.-) 1
 WHERE ` + identitySQL + `
   AND lease_token OPERATOR(pg_catalog.=) $6::pg_catalog.text AND state OPERATOR(pg_catalog.=) 'pending'`

// pruneSQL deletes up to $2 effects delivered at least $1 µs ago. SKIP
// LOCKED passes over rows another runner is deleting.
const pruneSQL = `DELETE FROM ONLY idempotency_outbox o
 USING (SELECT id FROM ONLY idempotency_outbox
         WHERE state OPERATOR(pg_catalog.=) 'delivered'
           AND delivered_at OPERATOR(pg_catalog.<=) (pg_catalog.clock_timestamp()
                            OPERATOR(pg_catalog.-) ($1::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 microsecond'::pg_catalog.interval))
         ORDER BY delivered_at
         LIMIT $2::pg_catalog.int8
           FOR UPDATE SKIP LOCKED) d
 WHERE o.id OPERATOR(pg_catalog.=) d.id`

// backlogSQL counts what is not delivered, through the index of
// undelivered effects.
const backlogSQL = `SELECT pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'pending'),
       pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'dead'),
       coalesce((extract(epoch FROM pg_catalog.clock_timestamp()
                                    OPERATOR(pg_catalog.-) pg_catalog.min(created_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'pending'))
                 OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8, 0)
  FROM ONLY idempotency_outbox
 WHERE state OPERATOR(pg_catalog.<>) 'delivered'`

// redriveSQL makes a dead effect pending again. The partial unique index
// refuses it when a pending effect has its effect key.
const redriveSQL = `UPDATE ONLY idempotency_outbox
   SET state = 'pending', attempts = 0, next_attempt_at = pg_catalog.clock_timestamp(),
       leased_until = NULL, lease_token = NULL
 WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 AND state OPERATOR(pg_catalog.=) 'dead'`

// listSQL selects effects by request and state; an empty argument
// selects everything, and $5 = 0 means no limit. A key is matched in its
// scope exactly, ” (a tenant-wide key) included. The limit is a CASE, not
// NULLIF, which finds its = by the search_path.
const listSQL = `SELECT ` + columns + `
  FROM ONLY idempotency_outbox o
 WHERE ($1::pg_catalog.text OPERATOR(pg_catalog.=) '' OR o.tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text)
   AND ($3::pg_catalog.text OPERATOR(pg_catalog.=) ''
        OR (o.key OPERATOR(pg_catalog.=) $3::pg_catalog.text AND o.scope OPERATOR(pg_catalog.=) $2::pg_catalog.text))
   AND ($6::pg_catalog.int8 OPERATOR(pg_catalog.=) 0 OR o.id OPERATOR(pg_catalog.=) $6::pg_catalog.int8)
   AND (pg_catalog.cardinality($4::pg_catalog.text[]) OPERATOR(pg_catalog.=) 0
        OR o.state OPERATOR(pg_catalog.=) ANY ($4::pg_catalog.text[]))
 ORDER BY o.id
 LIMIT CASE WHEN $5::pg_catalog.int8 OPERATOR(pg_catalog.=) 0 THEN NULL ELSE $5::pg_catalog.int8 END`
