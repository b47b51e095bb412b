// Package lincheck checks that the idempotency engine, in front of each
// store, keeps the contract of docs/semantics.md as real clients see it
// while faults are injected. Its tests run a small service on the engine in a child
// process, send it keyed requests from many concurrent clients (retries,
// reused keys with another body, fresh keys), record every request's call,
// return and answer, and check each history with porcupine against a
// model of the contract: at most one execution per key, every replay equal
// byte for byte to the executed answer, 422 exactly when the body differs
// from the executed one, 409 only while a claim is live, outcome-unknown
// only after a fault, and a 503 outside a fault as what it says: not
// processed, with no effect of its own in the store.
//
// The faults are a TCP proxy between the service and PostgreSQL or Redis
// that resets, refuses, stalls and delays connections, pg_terminate_backend
// of the service's backends, kill -9 and restart of the service, and
// clients that hang up. docs/verification.md says how to run the long
// version and what it found.
//
// In its effects mode, on every store the suite runs in a child process
// (SQLite, PostgreSQL, a single Redis and a Redis Cluster), the service's
// handler also charges a fake processor in the test process under the
// charge's effect key, in a recovery point where the store records one;
// on the stores with an outbox (SQLite and PostgreSQL) it stages a
// receipt in the key's transaction, which the service's outbox runner
// delivers to a receiver in the test process. After a final drain the
// checks hold the processor's and the receiver's records to the committed
// effect rows: one charge per logical request, every committed request's
// receipt delivered, none for a run that did not commit, and every repeat
// (a receipt delivered again, a recorded phase's processor call made
// again) explained by a fault.
package lincheck
