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
package lincheck
