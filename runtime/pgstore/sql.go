package pgstore

// Every statement pgstore sends is here. The decisions themselves live in
// the functions of the migration (templates/sql/postgres.up.sql), which
// explains why the claim is a plpgsql function and not a statement.

// claimSQL runs the atomic claim in one round trip. Durations travel as
// microseconds so that the lease and expiry are measured by the database
// clock, never by the application's.
//
// The join is the fast path for a row that already decides the claim: a
// live row that is completed, indeterminate, or in flight with its lease
// running. That is a plain read on the statement's snapshot, the decision
// idempotency_claim would reach itself on such a row, without the cost of
// a plpgsql call. Replays and conflicts, the retries of a busy
// API, take this path, and the last column is NULL. Whether the row is the
// same request (fingerprint and operation) is for the caller to compare;
// the only row the join passes over although it decides is one of another
// request whose lease ran out, and idempotency_claim answers that one
// "mismatch" itself.
//
// Everything else (no row, an expired row, an abandoned claim) leaves the
// outer join empty, and the last column calls idempotency_claim, whose
// comment explains the atomic claim; the other columns are NULL then. The
// one-row outer side makes the statement return exactly one row, so the
// function runs once or not at all. clock_timestamp() is read once, there,
// and returned beside lease_until: the caller subtracts the two.
//
// The shape is the cheapest of those measured for a replay. PostgreSQL sets
// up every expression of a statement on each execution, evaluated or not,
// and pays for each function and operator in it (a catalog lookup and a
// permission check), so the statement holds no test that the caller can
// make as well. The function is a scalar call in the select list rather
// than a FROM item: a FROM item (a UNION ALL branch behind LIMIT 1, or
// MATERIALIZED CTEs with a NOT EXISTS guard) sets up a function scan on
// every execution, even when it never runs. The price is that the
// function's result arrives as one anonymous record, readable only in the
// binary format (claimrow.go): pgstore needs pgx's default query execution
// mode, or another mode that describes statements (see the package comment).
const claimSQL = `SELECT ` + decidingColumnsSQL + `,
       CASE WHEN k.key IS NULL
            THEN idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       END
  FROM (SELECT clock_timestamp() AS now) t
  LEFT JOIN ` + decidingRowSQL

// peekSQL is claimSQL's read without the claim: the row that decides a
// claim of the key, if one does, and no row otherwise. A transactional
// claim sends it on its own before it begins a transaction (ClaimTx): a
// replay, a conflict with a visible row and a key in flight outside a
// transaction are answered by this one plain read, with no transaction,
// no timeouts and no guard. It decides exactly as claimSQL's join would on
// its own snapshot, a moment earlier.
const peekSQL = `SELECT ` + decidingColumnsSQL + `
  FROM (SELECT clock_timestamp() AS now) t
  JOIN ` + decidingRowSQL

// txClaimSQL is the claim inside a transaction (ClaimTx), sent behind
// BEGIN and txTimeoutsSQL after peekSQL found no row that decides it:
// idempotency_claim, called without claimSQL's read, which the peek has
// just made; a row that appeared since is one the function decides
// itself. Its record is the statement's one column (claimFields).
const txClaimSQL = `SELECT idempotency_claim($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.text,
                         $5::pg_catalog.bytea, $6::pg_catalog.text, $7::pg_catalog.int8, $8::pg_catalog.int8,
                         $9::pg_catalog.bool, true)`

// decidingColumnsSQL are the columns of a deciding row that claimSQL and
// peekSQL return (claimColumns).
const decidingColumnsSQL = `k.state, k.operation, k.fingerprint, k.lease_until, t.now,
       k.status, k.headers, k.body, k.body_omitted`

// decidingRowSQL joins the key's row to t.now when it decides a claim by
// itself: live, and completed, indeterminate, or in flight with its lease
// running.
const decidingRowSQL = `ONLY idempotency_keys k
    ON k.tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text AND k.scope OPERATOR(pg_catalog.=) $2::pg_catalog.text
   AND k.key OPERATOR(pg_catalog.=) $3::pg_catalog.text
   AND k.expires_at OPERATOR(pg_catalog.>) t.now
   AND (k.state OPERATOR(pg_catalog.<>) 'in_flight' OR k.lease_until OPERATOR(pg_catalog.>) t.now)`

// completeSQL stores the response of a claim made outside a transaction.
// It is fenced on the token like every write, and a row count of zero is
// ErrFenced. It is the same UPDATE as idempotency_complete's, sent as a
// plain statement: the plpgsql call around it cost the server more than
// the update itself.
const completeSQL = `UPDATE ONLY idempotency_keys
   SET state = 'completed', completed_at = clock_timestamp(),
       status = $5::pg_catalog.int4, headers = $6::pg_catalog.bytea, body = $7::pg_catalog.bytea, body_omitted = $8::pg_catalog.bool,
       lease_until = NULL` + heldRowSQL

// heldRowSQL selects, for completeSQL, releaseSQL, the abandons and
// markCommittedSQL, the key's row while it is in flight under the
// claim's token ($4): every write of a claim's holder is fenced on it.
const heldRowSQL = `
 WHERE tenant OPERATOR(pg_catalog.=) $1::pg_catalog.text AND scope OPERATOR(pg_catalog.=) $2::pg_catalog.text
   AND key OPERATOR(pg_catalog.=) $3::pg_catalog.text
   AND lease_token OPERATOR(pg_catalog.=) $4::pg_catalog.text AND state OPERATOR(pg_catalog.=) 'in_flight'`

// completeTxSQL stores the response inside the handler's transaction, and
// checks, in the same statement, that the transaction is still the one
// the claim began and that the handler left the store's tables as they
// were (sameTxCheckSQL, which otherwise runs as a statement of its own,
// sameTxSQL): $1 is both the transaction's mark and the claim's token, $2
// to $4 the relations, the writes and the beginning the check expects
// (txMark); $5 to $11 are completeArgs' but the token. The check is the CASE's first
// branch, so it runs before the update, which runs only when the second
// reads u: the writes it counts are the claim's and the handler's, not
// the completion's. A fenced completion must abort the
// transaction, which is what lets Tx.Commit queue COMMIT right behind it.
// The update is completeSQL's, as a plain statement; only when it updated
// nothing is idempotency_complete called, whose own update finds nothing
// either and raises SQLSTATE IK001. A transaction that is not the claim's
// fails with sameTxSQL's division_by_zero instead, wherever the statement
// had got to: either error aborts the whole statement, the update with
// it, and everything queued behind.
const completeTxSQL = `WITH u AS (
    UPDATE ONLY idempotency_keys
       SET state = 'completed', completed_at = pg_catalog.clock_timestamp(),
           status = $8::pg_catalog.int4, headers = $9::pg_catalog.bytea, body = $10::pg_catalog.bytea, body_omitted = $11::pg_catalog.bool,
           lease_until = NULL
     WHERE tenant OPERATOR(pg_catalog.=) $5::pg_catalog.text AND scope OPERATOR(pg_catalog.=) $6::pg_catalog.text
       AND key OPERATOR(pg_catalog.=) $7::pg_catalog.text
       AND lease_token OPERATOR(pg_catalog.=) $1::pg_catalog.text AND state OPERATOR(pg_catalog.=) 'in_flight'
    RETURNING 1)
SELECT CASE WHEN ` + sameTxCheckSQL + ` OPERATOR(pg_catalog.<>) 1
            THEN NULL
            WHEN NOT EXISTS (SELECT FROM u)
            THEN idempotency_complete($5, $6, $7, $1, $8, $9, $10, $11)
       END`

// releaseSQL deletes the row only for the current token of an in-flight
// claim: a late release from an abandoned request deletes nothing.
const releaseSQL = `DELETE FROM ONLY idempotency_keys` + heldRowSQL

// abandonTakeoverSQL ends the lease now, so the next claim of the same
// request takes the key over at once. Token-checked like every write.
const abandonTakeoverSQL = `UPDATE ONLY idempotency_keys
   SET lease_until = clock_timestamp()` + heldRowSQL

// abandonFailClosedSQL marks the key indeterminate for an operator to
// resolve.
const abandonFailClosedSQL = `UPDATE ONLY idempotency_keys
   SET state = 'indeterminate'` + heldRowSQL

// sweepSQL deletes a bounded batch of expired rows, skipping locked ones.
// idempotency_sweep is the store's, a name the end of a handler's
// transaction refuses in every schema (sameTxCheckSQL). It answers -1,
// and deletes nothing, while a store table has an inheritance child
// (pg_inherits, by its index on inhparent): a process of an earlier
// release that runs its Migrate puts back 000001's functions, whose
// sweep reads the key table without ONLY and would delete a live key
// for an expired row of the same key in the child.
const sweepSQL = `SELECT CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_inherits
                   WHERE inhparent OPERATOR(pg_catalog.=) ANY (ARRAY[pg_catalog.to_regclass('idempotency_keys'),
                         pg_catalog.to_regclass('idempotency_phases'), pg_catalog.to_regclass('idempotency_outbox')]::pg_catalog.oid[]))
            THEN -1 ELSE idempotency_sweep($1::pg_catalog.int4) END`

// txTimeoutsSQL bounds a hung transactional handler by the lease: the
// database itself ends a session that sits idle in the transaction, or runs
// one statement, for longer than the lease. SET LOCAL (is_local = true) ends
// with the transaction, so the pooled connection comes back clean.
//
// It also marks the transaction as pgstore's with $2, a value no other
// transaction has (sameTxSQL): the mark, SET LOCAL like the timeouts, is
// gone as soon as the transaction ends, however it ends. And a claim's
// transaction wears its request's badge, $4 (requestBadge; $3 is
// badgeClass), for as long as it lasts, so that settle can tell whom the
// key's holder serves, and its lease, $5, its milliseconds negated, a
// second lock of that class that no badge can be, so that a claim can tell
// a holder that outlived it (reapSQL); a keyless one passes NULLs and
// takes no lock. Its sixth column is when the transaction began, by the
// database's clock: what pgx prepared since then, it prepared for the
// handler (cached.go).
// Its last two are the relations the names of the store's tables resolve
// to on the session before the handler runs (watchedSQL), and what the
// transaction has written to them so far (txWritesSQL): see txMark. OFFSET
// 0 keeps the relations a subquery of their own, read once: PostgreSQL
// would otherwise pull the subquery up and evaluate watchedSQL, and the
// catalog read in it, at each of txWritesSQL's references to w.rels.
// When $6 is true, its two columns after those are idempotency_claim's
// oid and the version of its pg_proc row (claimVersionSQL), read before
// the claim that follows it in the same round trip has the session
// compile the function (compiled.go); NULL otherwise.
const txTimeoutsSQL = `SELECT pg_catalog.set_config('idle_in_transaction_session_timeout', $1, true),
       pg_catalog.set_config('statement_timeout', $1, true),
       pg_catalog.set_config('idemgen.transaction', $2, true),
       pg_catalog.pg_try_advisory_xact_lock_shared($3, $4),
       pg_catalog.pg_try_advisory_xact_lock_shared($3, $5),
       pg_catalog.transaction_timestamp(),
       w.rels, ` + txWritesSQL + `,
       w.claim, ` + claimVersionSQL + `w.claim)
  FROM (SELECT ` + watchedSQL + ` AS rels,
               CASE WHEN $6::pg_catalog.bool THEN ` + claimFunctionSQL + ` END AS claim
        OFFSET 0) w`

// watchedSQL are the relations that the names of the store's tables
// resolve to on the session: idempotency_keys, idempotency_phases and
// idempotency_outbox, in that order, with 0 for a table that is not there
// (the phases' and the outbox's migrations are the application's to
// apply), and last the outbox's identity sequence, from which its ids
// come (0 without an outbox), so that the end's check of the relations'
// catalog rows finds an ALTER SEQUENCE or an ALTER TABLE ... RESTART of
// it. A claim needs the first, so it is never NULL where one works.
const watchedSQL = `ARRAY[pg_catalog.to_regclass('idempotency_keys')::pg_catalog.oid,
             coalesce(pg_catalog.to_regclass('idempotency_phases')::pg_catalog.oid, 0::pg_catalog.oid),
             coalesce(pg_catalog.to_regclass('idempotency_outbox')::pg_catalog.oid, 0::pg_catalog.oid),
             coalesce((SELECT objid FROM pg_catalog.pg_depend
                        WHERE refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND refobjid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('idempotency_outbox')::pg_catalog.oid
                          AND refobjsubid OPERATOR(pg_catalog.<>) 0
                          AND classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND deptype OPERATOR(pg_catalog.=) 'i'
                        LIMIT 1), 0::pg_catalog.oid)]`

// txWritesSQL counts, for w.rels (watchedSQL), what the session has
// written to the store's tables, by PostgreSQL's statistics of the open
// transaction, which count a row as soon as it is written, in a
// subtransaction rolled back too: the rows inserted or updated in
// idempotency_keys or inserted into idempotency_outbox; the rows deleted
// from the keys, written to idempotency_phases, or updated or deleted in
// idempotency_outbox; and
// the role settings (ALTER ROLE or ALTER DATABASE ... SET) that apply to
// a new session of this role in this database. PostgreSQL may still hold
// there the counts of the session's earlier transactions, so the counts
// are taken as the transaction begins and compared at its end
// (sameTxCheckSQL): a claim inserts or updates its one row of
// idempotency_keys and nothing else, the phases are recorded on sessions
// of their own, and the outbox takes only the rows StageEffect inserted
// under the claim's identity, which the end expects beside the claim's
// (txMark): a row the handler inserted itself, under any identity, in a
// savepoint released or rolled back too, is one more than expected. A TRUNCATE, which
// lowers the counts, is refused by its change to the table's pg_class
// row. Its last count is not of writes but of the indexes and
// constraints of the store's tables: dropping one (the key's primary key,
// which every claim's ON CONFLICT needs) deletes catalog rows and writes
// none that the end could find by its xmin. Those two count the
// relations' entries one by one, not by ANY (w.rels): over an array of
// unknown length PostgreSQL's generic plan of the prepared check is
// estimated dearer than one planned for each execution's values, and it
// plans the check anew every time, at three times the cost of the check.
const txWritesSQL = `ARRAY[pg_catalog.pg_stat_get_xact_tuples_inserted(w.rels[1])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(w.rels[1])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_inserted(w.rels[3]),
       pg_catalog.pg_stat_get_xact_tuples_deleted(w.rels[1])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_inserted(w.rels[2])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(w.rels[2])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_deleted(w.rels[2])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_updated(w.rels[3])
           OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_xact_tuples_deleted(w.rels[3]),
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_db_role_setting WHERE ` + sessionSettingsSQL + `),
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_index
         WHERE indrelid OPERATOR(pg_catalog.=) ANY (ARRAY[w.rels[1], w.rels[2], w.rels[3]]))
           OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM pg_catalog.pg_constraint
                                    WHERE conrelid OPERATOR(pg_catalog.=) ANY (ARRAY[w.rels[1], w.rels[2], w.rels[3]]))]`

// sessionSettingsSQL selects, in pg_db_role_setting, the settings that a
// new session of the connection's role in this database starts with: a
// search_path there decides what the names in pgstore's statements and
// functions resolve to on every connection opened afterwards.
const sessionSettingsSQL = `setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0, (SELECT oid FROM pg_catalog.pg_database
                                                  WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())]::pg_catalog.oid[])
     AND setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0, (SELECT oid FROM pg_catalog.pg_roles
                                              WHERE rolname OPERATOR(pg_catalog.=) session_user)]::pg_catalog.oid[])`

// sameTxSQL runs first in the batch that ends a handler's transaction. It
// fails, with division_by_zero (sqlstateNotSameTx), unless the connection
// is still in the transaction txTimeoutsSQL marked with $1: a handler that
// ended it and began another in the same statement (COMMIT AND CHAIN, or
// COMMIT; BEGIN through the simple protocol) leaves the connection in a
// transaction without the mark, where it cannot be told apart by its
// status. It fails the same way when the handler changed the store's
// tables or what their names resolve to ($2 and $3, see txMark and
// sameTxCheckSQL): the completion, or a later request, would write
// another relation, or find another's key gone. The failure aborts
// that transaction, so nothing queued behind the check (a completion, a
// COMMIT) runs. current_setting is not evaluated when the statement is
// planned, so neither is the division. Every function and operator is
// pg_catalog's: the statement is parsed under the handler's search_path.
const sameTxSQL = `SELECT ` + sameTxCheckSQL

// sameTxCheckSQL is sameTxSQL's expression, with the transaction's mark
// as $1, the relations of the store's tables as $2 (watchedSQL), the
// writes expected of the transaction as $3 (txWritesSQL) and the time the
// transaction began as $4: 1, or division_by_zero. completeTxSQL makes
// the same check. The mark is a setting, which the handler can read and
// set again in a transaction of its own; the time its transaction began
// it cannot choose, and pgstore holds the one it expects itself, so a
// transaction begun after the claim's is refused whatever its mark.
// Besides the mark and that time, it fails a transaction
//
//   - in which PostgreSQL stopped counting the writes it compares
//     (track_counts off, which only a superuser may set: a superuser
//     handler has other routes, and the role is assumed not to be one,
//     docs/semantics.md §7.2);
//   - in which a name of the store's tables came to resolve to another
//     relation;
//   - that wrote to the store's tables what pgstore did not (a row of
//     another key deleted or rewritten, a phase, an outbox row changed,
//     or one inserted otherwise than by StageEffect: a keyless
//     transaction stages nothing),
//     or changed the settings that a new session of the role starts with
//     (a search_path that makes the names resolve elsewhere on every
//     connection opened afterwards);
//   - in which one of the store's tables itself (its pg_class row: a
//     TRUNCATE, an ALTER TABLE), a column, a default, a constraint, an
//     index, a trigger, a rule or a row security policy on one of them,
//     the outbox's identity sequence (watchedSQL's last relation, by its
//     pg_class and pg_sequence rows: ALTER SEQUENCE, or ALTER TABLE ...
//     RESTART, which would give a new effect the id of a row the outbox
//     has or had; setval writes neither, and no rollback undoes it,
//     docs/semantics.md §7.2),
//     or a role setting of the kind counted was made or changed
//     (age(xmin) <= 0: written by this transaction, a subtransaction of
//     it, or one that began after it), or an index or a constraint of
//     theirs dropped (txWritesSQL's last count);
//   - that ends with one of the store's tables the parent or the child
//     of an inheritance (pg_inherits: CREATE TABLE ... INHERITS,
//     ALTER TABLE ... INHERIT, a partition attached): the write counts
//     are of the store's own relations, so a row written in a child is
//     counted nowhere. Every statement of the store's and the runners'
//     reads and writes the tables with ONLY and never sees such a row,
//     but a table that has a child at all is refused, whoever made the
//     child and when: PostgreSQL leaves the parent's relhassubclass set
//     after its last child is dropped, so the table's pg_class row tells
//     nothing, and a child that is there takes a handler's INSERT
//     without a change to any catalog;
//   - that made a schema (but the session's temporary ones, pg_temp_N and
//     pg_toast_temp_N, which its first temporary table makes, and which
//     no search_path but its own finds; no other schema may be named pg_),
//     or, in any schema, made or replaced a relation
//     named like one of the store's tables, a function named like one of
//     the store's (storeFunctionsSQL) or like one of pg_catalog's that
//     the statements or the functions' bodies call unqualified
//     (searchPathFunctionsSQL), a type named like one the migrations'
//     DDL or the bodies declare or cast to unqualified
//     (searchPathTypesSQL), or a domain constraint on a type of such a
//     name (whose CHECK would run the handler's code wherever a column
//     of the domain is written; a domain's constraints are those with
//     no relation, which the index on conrelid finds without reading
//     the whole catalog), a collation named "C" (the migrations'
//     key columns' COLLATE "C"; a nondeterministic one would make two
//     keys one), or any operator
//     (ownRowSQL: written by this transaction or a subtransaction of
//     it). The store's functions' bodies, which have no search_path of
//     their own, find all of these through the session's search_path, and
//     so do the store's statements the tables, the functions and
//     clock_timestamp (every other name in them is pg_catalog's by name):
//     a schema named after the role comes first on the default one
//     ("$user"); a function, a type or an operator of pg_catalog's name
//     and argument types is chosen in place of pg_catalog's wherever the
//     path names pg_catalog after the handler's schema (a deployment's
//     "app, pg_catalog"); and one that matches the arguments better than
//     pg_catalog's (a bigint * interval, an integer || text in the
//     bodies; the lock's uncast parameters in the statements of a
//     process of an earlier version) is chosen wherever it stands on the
//     path. Operators are looked for by their oid, above those initdb
//     gives (16384, FirstNormalObjectId): through pg_operator's index on
//     oid the check reads only the operators of extensions and of the
//     application's schemas, where the names the bodies use would walk
//     half of pg_catalog's; a request's handler makes none.
//
// Any of them could rewrite or undo a completion or a phase or an effect,
// this request's or another tenant's, now or later, and the handler's role
// may make them where it owns the tables (docs/semantics.md §7.2). A keyed
// transaction's key then fails closed, as for a handler that ended its
// transaction itself.
const sameTxCheckSQL = `1 OPERATOR(pg_catalog./) (
         coalesce(pg_catalog.current_setting('idemgen.transaction', true), '') OPERATOR(pg_catalog.=) $1::pg_catalog.text
     AND coalesce(` + watchedSQL + ` OPERATOR(pg_catalog.=) $2::pg_catalog.oid[], false)
     AND pg_catalog.transaction_timestamp() OPERATOR(pg_catalog.=) $4::pg_catalog.timestamptz
     AND pg_catalog.current_setting('track_counts') OPERATOR(pg_catalog.=) 'on'
     AND (SELECT ` + txWritesSQL + ` FROM (SELECT $2::pg_catalog.oid[] AS rels) w) OPERATOR(pg_catalog.=) $3::pg_catalog.int8[]
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_class WHERE oid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_attrdef WHERE adrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint WHERE conrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_index WHERE indrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_rewrite WHERE ev_class ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy WHERE polrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits
                      WHERE inhparent OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.oid[])
                         OR inhrelid OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.oid[]))
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_sequence WHERE seqrelid ` + watchedMadeHereSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_db_role_setting
                      WHERE ` + sessionSettingsSQL + `
                        AND pg_catalog.age(xmin) OPERATOR(pg_catalog.<=) 0)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_namespace c
                      WHERE NOT nspname OPERATOR(pg_catalog.~~) 'pg\_%'
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c
                      WHERE relname OPERATOR(pg_catalog.=) ANY (` + storeTablesSQL + `)
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc c
                      WHERE proname OPERATOR(pg_catalog.=) ANY (` + storeFunctionsSQL + `
                                                                OPERATOR(pg_catalog.||) ` + searchPathFunctionsSQL + `)
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_type c
                      WHERE typname OPERATOR(pg_catalog.=) ANY (` + searchPathTypesSQL + `)
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint c
                      WHERE conrelid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                        AND contypid OPERATOR(pg_catalog.=) ANY (SELECT oid FROM pg_catalog.pg_type
                                      WHERE typname OPERATOR(pg_catalog.=) ANY (` + searchPathTypesSQL + `))
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_collation c
                      WHERE collname OPERATOR(pg_catalog.=) 'C'
                        AND ` + ownRowSQL + `)
     AND NOT EXISTS (SELECT FROM pg_catalog.pg_operator c
                      WHERE oid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid
                        AND ` + ownRowSQL + `)
       )::pg_catalog.int4`

// storeTablesSQL and storeFunctionsSQL are the names of the tables and
// the functions that the migrations create (sameTxCheckSQL).
const (
	storeTablesSQL    = `'{idempotency_keys,idempotency_phases,idempotency_outbox}'::pg_catalog.name[]`
	storeFunctionsSQL = `'{idempotency_claim,idempotency_complete,idempotency_lock_id,idempotency_request_lock_id,idempotency_sweep}'::pg_catalog.name[]`
)

// searchPathFunctionsSQL and searchPathTypesSQL are the names of
// pg_catalog's functions and types that pgstore's statements and the
// bodies of the store's functions find through the session's search_path
// (sameTxCheckSQL): the statements' clock_timestamp (clockByPath), what
// the bodies call and the types they declare and cast to, the types the
// migrations' DDL names unqualified (text, bytea: a migration a tool
// applies under a search_path that names pg_catalog late finds them
// there), and the lock
// that the statements of a process of an earlier version name uncast. A
// test derives them from the migrations and the statements
// (TestSearchPathNamesAreWatched), so that a name a function's body
// comes to use unqualified is refused too.
const (
	searchPathFunctionsSQL = `'{clock_timestamp,count,current_setting,encode,hashtextextended,length,pg_advisory_lock,pg_try_advisory_xact_lock,pg_try_advisory_xact_lock_shared}'::pg_catalog.name[]`
	searchPathTypesSQL     = `'{bytea,oid,regclass,text,timestamptz,void}'::pg_catalog.name[]`
)

// ownRowSQL holds for a row c of a catalog that this transaction, or a
// subtransaction of it, wrote (sameTxCheckSQL). age(xmin) <= 0 keeps the
// rows of this transaction and of those that began after it; of these,
// as another transaction's catalog row is visible only once that
// transaction has committed, the rows whose xmin is still in progress
// are this transaction's own: a concurrent Migrate, say, is not counted.
// pg_xact_status takes the full transaction id, which is xmin's distance
// past this transaction's id added to it (a subtransaction's id comes
// after its parent's); the CASE keeps it from a row with another xmin,
// whose id it would take for one in the future, an error. A transaction
// without an id wrote no row.
const ownRowSQL = `CASE WHEN pg_catalog.age(c.xmin) OPERATOR(pg_catalog.<=) 0
                        THEN (SELECT pg_catalog.pg_xact_status((t.top OPERATOR(pg_catalog.+)
                                         (((c.xmin::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.-) (t.top OPERATOR(pg_catalog.%) 4294967296))
                                           OPERATOR(pg_catalog.+) 4294967296) OPERATOR(pg_catalog.%) 4294967296))::pg_catalog.text::pg_catalog.xid8)
                                FROM (SELECT pg_catalog.pg_current_xact_id_if_assigned()::pg_catalog.text::pg_catalog.int8 AS top) t)
                             OPERATOR(pg_catalog.=) 'in progress'
                   END`

// watchedMadeHereSQL ends a condition on a catalog's column that names a
// relation: one of the store's tables ($2, watchedSQL), in a row written
// by this transaction, a subtransaction of it, or one that began after it
// (sameTxCheckSQL).
const watchedMadeHereSQL = `OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.oid[])
                        AND pg_catalog.age(xmin) OPERATOR(pg_catalog.<=) 0`

// resetSQL gives back a connection that a transactional claim or a
// handler used as the pool handed it out. It is DISCARD ALL without
// DEALLOCATE ALL (pgx's statement cache lives on the connection; DISCARD
// ALL cannot run in a pipeline either): pg_advisory_unlock_all releases the
// session-level locks a won claim takes beside its transaction's
// (idempotency_claim's p_hold) and any a handler took; the rest undoes what
// a handler may have left on the session (SET without LOCAL, SET ROLE,
// cursors WITH HOLD, LISTEN, temporary objects, prepared statements), which
// would otherwise reach unrelated requests; sendReset adds reseedSQL.
// RESET restores each setting to the value the connection started with,
// including those in its connection string, but not those an AfterConnect
// hook SET.
//
// A transaction's end sends leanResetSQL instead, and this only when
// sessionCheckSQL finds something on the session that the lean reset does
// not undo, or when a connection is given back after an error.
var resetSQL = [...]string{
	`SET SESSION AUTHORIZATION DEFAULT`,
	`RESET ROLE`,
	`RESET ALL`,
	`CLOSE ALL`,
	`UNLISTEN *`,
	`SELECT pg_catalog.pg_advisory_unlock_all()`,
	`DISCARD TEMP`,
	`DISCARD SEQUENCES`,
	deallocateSQL,
}

// leanResetSQL is the reset queued behind the statement that ends a
// transaction, after sessionCheckSQL, so that neither costs a round trip
// of its own. sessionCheckSQL releases the session-level locks (a won
// claim's, and any a handler took) and asks whether the handler left
// anything else that only resetSQL undoes; these two statements undo at
// once what is cheaper to undo than to look for:
//
//   - RESET ALL, for the settings: a handler's SET is seen only through
//     pg_settings, which builds every one of several hundred settings as
//     text, ten times the time of a SELECT 1 or more, where RESET ALL costs
//     what any short statement does;
//   - DISCARD SEQUENCES, because what currval and lastval remember cannot
//     be seen at all, and a handler that inserts into a table with a
//     serial column leaves it on nearly every request.
var leanResetSQL = [...]string{
	`RESET ALL`,
	`DISCARD SEQUENCES`,
}

// reseedSQL seeds random() afresh with $1, a value drawn by the process
// (newSeed). A handler's setseed would otherwise make the next request's
// random() predictable, and PostgreSQL has no statement that gives a
// session back the seed a new one draws. It travels in the statements of
// every reset: as a column of sessionCheckSQL, and after resetSQL.
const reseedSQL = `SELECT pg_catalog.setseed($1)`

// compileClaimSQL has the session compile idempotency_claim, by pgstore's
// own call, before a handler's transaction runs on it (compiled.go), and
// returns the function's oid and the version of its pg_proc row, read
// before the call: were the function replaced in between, the session
// check would read another version and the connection be closed. The
// call claims a key of no tenant, $1, in a transaction that is rolled
// back.
const compileClaimSQL = `SELECT v.oid, v.version,
       (idempotency_claim(''::pg_catalog.text, ''::pg_catalog.text, $1::pg_catalog.text, ''::pg_catalog.text,
                          ''::pg_catalog.bytea, $1::pg_catalog.text, 1::pg_catalog.int8, 1::pg_catalog.int8,
                          true, false)).r_outcome
  FROM (SELECT f.oid, ` + claimVersionSQL + `f.oid) AS version
          FROM (SELECT ` + claimFunctionSQL + ` AS oid) f
        OFFSET 0) v`

// claimFunctionSQL is the oid of the idempotency_claim that pgstore's
// claims call (txClaimSQL), as the session's search_path finds it.
const claimFunctionSQL = `pg_catalog.to_regprocedure('idempotency_claim(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.bytea, pg_catalog.text, pg_catalog.int8, pg_catalog.int8, pg_catalog.bool, pg_catalog.bool)')::pg_catalog.oid`

// claimVersionSQL, completed by a function's oid and a closing
// parenthesis, is the version of the function's pg_proc row: its xmin and
// ctid, which PL/pgSQL compares with those of the row it compiled the
// function from before each call, compiling it anew when either differs.
const claimVersionSQL = `(SELECT pg_catalog.concat(p.xmin, ' ', p.ctid) FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) `

// sessionCheckSQL releases the session's advisory locks, seeds random()
// afresh with $2 (reseedSQL), and answers true when the session holds
// something of a handler's that only resetSQL undoes, looking where
// PostgreSQL keeps each: a role set with SET ROLE (current_user is not
// session_user), a session authorization set with SET SESSION
// AUTHORIZATION (session_user is not $1, the connection's user), a
// prepared statement of the handler's (handlerPreparedSQL), a cursor WITH
// HOLD, a channel it listens to, and a temporary object of any kind (every
// object in a schema depends on it in pg_depend, and DISCARD TEMP drops
// what depends on the session's temporary schema). It runs after the
// transaction has ended: a rolled-back handler's objects are gone by then,
// and only cursors WITH HOLD outlive a transaction (pg_cursors also lists
// the portal of the statement that reads it). Each test reads an in-memory
// list of the session's own or one index range of pg_depend, none builds
// more than its answer. Every relation, function, type and operator it
// names is pg_catalog's by name: a handler's temporary view is found
// before pg_catalog's relation of the same unqualified name, and one named
// pg_prepared_statements or pg_depend that shows nothing would answer that
// the session is clean; and the check runs under the handler's
// search_path, before leanResetSQL's RESET ALL, where an operator of a
// schema the handler put before pg_catalog (an oid = oid that answers
// false) would hide its temporary objects. So too in replacedSQL,
// deallocateSQL and resetSQL. Its fourth column lists the statements
// that pgx's statement cache prepared since $3, when the handler's
// transaction began (cachedSinceSQL); both read pg_prepared_statements,
// which PostgreSQL builds whole, texts and all, where it is read, so they
// read it once, with the handler's statements, in ps. Its fifth tells whether the check
// itself was parsed since then: 'now' becomes a constant, the time it is
// parsed at, and a prepared statement is parsed again only once something
// made it invalid. The same may then have happened to any statement the
// handler ran (DISCARD PLANS), which it would have had parsed under its
// own settings (discardPlansSQL). Its last is the version of the pg_proc
// row of the function whose oid is $4, idempotency_claim, which tells
// whether the session's compiled claim is still pgstore's (compiled.go).
const sessionCheckSQL = `SELECT pg_catalog.pg_advisory_unlock_all(), pg_catalog.setseed($2),
       current_user OPERATOR(pg_catalog.<>) session_user
       OR session_user OPERATOR(pg_catalog.<>) $1
       OR ps.handler
       OR EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable)
       OR EXISTS (SELECT FROM pg_catalog.pg_listening_channels())
       OR EXISTS (SELECT FROM pg_catalog.pg_depend
                   WHERE refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
                     AND refobjid OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()),
       ps.cached,
       'now'::pg_catalog.timestamptz OPERATOR(pg_catalog.>=) $3::pg_catalog.timestamptz,
       ` + claimVersionSQL + `$4::pg_catalog.oid)
  FROM (SELECT COALESCE(pg_catalog.bool_or(` + handlerPreparedSQL + `), false) AS handler,
               ` + cachedSinceSQL + ` AS cached
          FROM pg_catalog.pg_prepared_statements) AS ps`

// handlerPreparedSQL selects, in pg_prepared_statements, the statements a
// handler prepared: every statement prepared from SQL (PREPARE), whatever
// its name, and every other one (pgx.Tx.Prepare, which pgstore also makes
// pgx forget: preparedNames) but those under driverNameSQL's names. Those
// are prepared over the protocol, never from SQL: pgx's statement cache
// and PgBouncer go on using them. A cached statement's name is no secret
// (pgx's is a hash of the statement's text), so a PREPARE under it is the
// handler's like any other, or it would answer the next request's query
// on the connection, or pgstore's own claim, with rows the handler chose.
const handlerPreparedSQL = `(from_sql OR NOT ` + driverNameSQL + `)`

// driverNameSQL matches the names of the statements that pgx's statement
// cache prepares (the prefix stmtcache_, then a hash of the text), those
// PgBouncer (1.21 and later, with max_prepared_statements) prepares under
// names of its own on a server connection that its clients share, and
// pgstore's own (ownPrefix). handlerTx.Prepare refuses pgx's prefix and
// pgstore's.
const driverNameSQL = `(name OPERATOR(pg_catalog.~~) 'stmtcache\_%' OR name OPERATOR(pg_catalog.~~) 'PGBOUNCER\_%'
    OR name OPERATOR(pg_catalog.~~) 'idemgen\_%')`

// deallocateSQL drops the statements a handler prepared
// (handlerPreparedSQL). DEALLOCATE takes neither a list nor a pattern,
// hence the loop. A handler that prepared a statement under a driver's
// name from SQL has replaced one that the driver believes it still has
// (it deallocated the driver's first), so once every statement is dropped
// the block fails: the reset has failed, and the connection, whose driver
// would otherwise run a statement that is gone, is closed rather than
// pooled.
const deallocateSQL = `DO $$
DECLARE
    n text;
    driver boolean;
    taken text;
BEGIN
    FOR n, driver IN SELECT name, ` + driverNameSQL + ` FROM pg_catalog.pg_prepared_statements WHERE ` + handlerPreparedSQL + ` LOOP
        EXECUTE pg_catalog.format('DEALLOCATE %I', n);
        IF driver THEN
            taken := n;
        END IF;
    END LOOP;
    IF taken IS NOT NULL THEN
        RAISE EXCEPTION 'a handler prepared statement % from SQL under a name of the driver''s', taken;
    END IF;
END
$$`

// markCommittedSQL runs when a transactional Commit failed: its claim row
// should have been rolled back with it. A row that is still in flight under
// the claim's token was committed by the handler itself (a raw COMMIT), with
// some of its effects, so the key is marked indeterminate rather than left
// for a takeover that could repeat them. It runs while the claim's session
// locks keep every other claim out, and is fenced on the token.
const markCommittedSQL = `UPDATE ONLY idempotency_keys
   SET state = 'indeterminate', lease_until = NULL` + heldRowSQL

// failClosedTxSQL runs when the handler ended its transaction itself (a raw
// COMMIT or ROLLBACK): what its writes became cannot be known, so the key
// becomes indeterminate whether its claim row survived (COMMIT) or vanished
// (ROLLBACK). The conflict branch is fenced: it marks only the claim's own
// in-flight row, or replaces an expired one, and never overwrites a row
// that another request holds. It runs while the claim's session locks keep
// every other claim out. The TTL runs from now, as for a new claim.
const failClosedTxSQL = `INSERT INTO idempotency_keys AS k
       (tenant, scope, key, operation, fingerprint, state,
        lease_token, lease_until, expires_at, created_at)
VALUES ($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $5::pg_catalog.text, $6::pg_catalog.bytea, 'indeterminate', $4::pg_catalog.text, NULL,
        clock_timestamp() OPERATOR(pg_catalog.+) ($7 OPERATOR(pg_catalog.*) interval '1 microsecond'),
        clock_timestamp())
ON CONFLICT (tenant, scope, key) DO UPDATE
   SET state        = 'indeterminate',
       operation    = excluded.operation,
       fingerprint  = excluded.fingerprint,
       lease_token  = excluded.lease_token,
       lease_until  = NULL,
       expires_at   = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) clock_timestamp()
                           THEN excluded.expires_at ELSE k.expires_at END,
       created_at   = CASE WHEN k.expires_at OPERATOR(pg_catalog.<=) clock_timestamp()
                           THEN excluded.created_at ELSE k.created_at END,
       completed_at = NULL,
       status       = NULL,
       headers      = NULL,
       body         = NULL,
       body_omitted = false
 WHERE (k.lease_token OPERATOR(pg_catalog.=) excluded.lease_token AND k.state OPERATOR(pg_catalog.=) 'in_flight')
    OR k.expires_at OPERATOR(pg_catalog.<=) clock_timestamp()`

// discardPlansSQL makes every statement prepared on the session parse
// again where it runs next. A prepared statement is parsed again, where
// it next runs, once something made it invalid, and keeps what that parse
// read of the session's settings: a constant written in a format that
// DateStyle or TimeZone reads, or x = NULL under transform_null_equals.
// After a handler whose session made the statements invalid (DISCARD
// PLANS, which needs no privilege), they are parsed again in the clean
// session before another request runs them. It travels with the full
// reset.
const discardPlansSQL = `DISCARD PLANS`

// settleSessionSQL runs before settle marks a key, on the session of a
// handler that may have ended its transaction itself and then changed the
// session at will: it undoes what decides where settle's statements write
// (the role, every setting, the search_path and default_transaction_read_only
// among them, temporary relations named like the store's table), so that
// they mark the key's own row. The claim's session locks stay: they keep
// every other claim away until the key is settled.
const settleSessionSQL = `SET SESSION AUTHORIZATION DEFAULT; RESET ROLE; RESET ALL; DISCARD TEMP`

const (
	commitSQL   = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// PostgreSQL runs some of a transaction's work inside its COMMIT, after
// every statement pgstore could check it with: the deferred triggers
// still pending (a constraint trigger DEFERRABLE INITIALLY DEFERRED, or
// one SET CONSTRAINTS deferred), and the query of every cursor WITH HOLD,
// which it runs to its end so that the cursor outlives the transaction. A
// handler that makes either, on a table or with a function of its own,
// would have it write at COMMIT what the check of the transaction's end
// refuses (another tenant's key deleted), unseen. So the end of a
// transaction that commits is guarded (sendEnding), in the same round
// trip:
//
//   - closeCursorsSQL and fireDeferredSQL run before the check: no cursor
//     is left to run at COMMIT, and every deferred trigger pending fires
//     there, its writes counted by the check like the handler's own (the
//     deferred checks of foreign keys and unique constraints fire there
//     too, and fail the transaction as they would have at COMMIT);
//   - readOnlySQL runs after the check and the completion, just before
//     COMMIT: a trigger fired by fireDeferredSQL can defer an event anew
//     (SET CONSTRAINTS ... DEFERRED, then a write), and a cursor can be
//     declared by no statement of pgstore's but by such a trigger; what
//     either runs at COMMIT then runs in a transaction that may write
//     nothing but temporary tables (a transaction may become read-only
//     at any point, never read-write again), so a write there fails the
//     COMMIT and the whole transaction rolls back. What it can still
//     change is the session's own (a setting, a lock, a temporary
//     object, a prepared statement), which sessionCheckSQL, run after
//     the COMMIT, finds and the reset undoes.
const (
	closeCursorsSQL = `CLOSE ALL`
	fireDeferredSQL = `SET CONSTRAINTS ALL IMMEDIATE`
	readOnlySQL     = `SET TRANSACTION READ ONLY`
)

// migrateLockSQL serializes concurrent Migrate calls (several replicas or
// test processes starting at once): CREATE ... IF NOT EXISTS and CREATE OR
// REPLACE FUNCTION are not safe against each other without it. The number is
// arbitrary and fixed.
const migrateLockSQL = `SELECT pg_catalog.pg_advisory_xact_lock(7236194020345570123)`

// sqlstateFenced is the SQLSTATE idempotency_complete raises when the lease
// token is no longer current.
const sqlstateFenced = "IK001"

// sqlstateNotSameTx is the SQLSTATE (division_by_zero) of sameTxSQL in a
// transaction pgstore did not begin.
const sqlstateNotSameTx = "22012"

// sqlstateNoStatement is the SQLSTATE (invalid_sql_statement_name) of the
// use of a prepared statement that does not exist.
const sqlstateNoStatement = "26000"

// sqlstateStalePlan is the SQLSTATE (feature_not_supported) of the use of
// a prepared statement whose result's type has changed since it was
// prepared.
const sqlstateStalePlan = "0A000"
