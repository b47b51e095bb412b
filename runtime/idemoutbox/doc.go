// Package idemoutbox is a transactional outbox for the SQL stores: a
// handler stages an effect (an e-mail, a webhook, any message) in its key's
// own transaction, so that the effect exists if and only if the request's
// writes committed, and a Runner delivers each staged effect at least once,
// with its effect key (idem.EffectKey), retrying with backoff and jitter
// and setting aside as dead an effect that fails too often.
//
// The package holds what does not depend on the database: the rows
// (Message), the checks a staged effect passes (Prepare), the runner, and
// the Store interface the dialects implement. The dialects live beside it,
// each with its driver: pgoutbox (pgx, with pgstore) and sqliteoutbox
// (database/sql, with sqlitestore). Each creates its table with a
// migration of its own (Migrate, or Schema for a migration tool): the key
// table's released migration never changes, and a service that stages no
// effects never needs the outbox's.
//
// docs/effects.md says when to use it rather than an effect key passed to a
// downstream that honours keys, how many runners may run, and what a kill
// at each point leaves behind.
package idemoutbox
