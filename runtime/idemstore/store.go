// Package idemstore is what an idempotency store is and keeps, apart from
// the engine that decides (runtime/idem), as database/sql/driver is apart
// from database/sql: the Store and Transactor interfaces every store
// implements, the rows they record (Claim, Record, Response), the rules
// of what may be stored (Storable, NeverStored), and the at-rest
// protection of those rows: keys and fingerprints kept as HMACs (Secret)
// and responses sealed (Sealer). Stores and the operator's tools
// (runtime/idemadmin) import it; only services import the engine.
package idemstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrFenced reports that a completion, release or abandonment came from a
// request that no longer holds the claim's lease token: another request took
// the key over. Nothing was changed.
var ErrFenced = errors.New("idemstore: lease token is no longer current")

// ErrOutcomeUnknown reports that a handler's effects may or may not have
// committed: in transactional mode the handler ended or escaped the
// transaction it was given (a raw COMMIT or ROLLBACK), so the store cannot
// tell what its writes became. The store has left the key indeterminate
// (or held) rather than free, so that no retry can repeat an applied
// effect; an operator resolves it.
var ErrOutcomeUnknown = errors.New("idemstore: the handler's effects may or may not have committed; the key is left indeterminate/held")

// ErrClaimEnded reports that a transaction's Rollback or Commit could not
// reach the database because its connection had closed, and that the
// database ended the transaction, and the claim in it, with the
// connection: the claim does not stay for its lease, and a retry wins the
// key. A store wraps it only when that is certain.
var ErrClaimEnded = errors.New("idemstore: the transaction ended with its connection, and its claim with it")

// Identity is what the database keeps unique: one row per (tenant, scope, key).
type Identity struct {
	Tenant string
	// Scope is the operation ID for idem.ScopeOperation and "" for
	// idem.ScopeTenant.
	Scope string
	Key   string
}

// State is the state of a stored key.
type State string

// The states a stored key can be in.
const (
	StateInFlight      State = "in_flight"
	StateCompleted     State = "completed"
	StateIndeterminate State = "indeterminate"
)

// States lists the states a stored key can be in.
func States() []State { return []State{StateInFlight, StateCompleted, StateIndeterminate} }

// LeaseExpiry says what a retry meets when it finds an abandoned claim.
type LeaseExpiry string

// The two answers to an abandoned claim.
const (
	// Takeover re-claims the key with a new lease token and runs the handler
	// again. Safe when the handler's effects are transactional.
	Takeover LeaseExpiry = "takeover"
	// FailClosed marks the key indeterminate; an operator resolves it.
	FailClosed LeaseExpiry = "fail-closed"
)

// Claim asks a store to claim a key for one request.
type Claim struct {
	Identity
	// Operation is the operation ID of the request; with idem.ScopeTenant a
	// different operation on the same key is a mismatch.
	Operation string
	// Fingerprint is the SHA-256 of the request's canonical form.
	Fingerprint []byte
	// Token is the new lease token; only its holder may complete or release
	// the claim.
	Token string
	// Lease and TTL are measured from the claim by the store's own clock.
	Lease time.Duration
	TTL   time.Duration
	// OnLeaseExpiry decides, atomically within the claim, what happens to an
	// in-flight row of the same request whose lease has run out: Takeover
	// wins it with Token, FailClosed marks it indeterminate.
	OnLeaseExpiry LeaseExpiry
}

// ErrInvalidClaim reports a claim no store records: Check's rules. Stores
// refuse such a claim before touching the key.
var ErrInvalidClaim = errors.New("idemstore: invalid claim")

// Check reports, wrapping ErrInvalidClaim, why c cannot be recorded: every
// store applies it before a claim, so they all refuse the same claims.
// Lease and TTL are at least a microsecond, the finest unit a store keeps
// (0 would mean "already expired" to one store and "never" to another);
// the lease token is not empty, since it alone fences completions and a
// fail-closed claim clears the token it marks indeterminate; and
// OnLeaseExpiry is one of the two modes, never a third that each store
// would read its own way.
func (c Claim) Check() error {
	switch {
	case c.Token == "":
		return fmt.Errorf("%w: empty lease token", ErrInvalidClaim)
	case c.Lease < time.Microsecond || c.TTL < time.Microsecond:
		return fmt.Errorf("%w: lease (%v) and ttl (%v) must be at least 1µs", ErrInvalidClaim, c.Lease, c.TTL)
	case c.OnLeaseExpiry != Takeover && c.OnLeaseExpiry != FailClosed:
		return fmt.Errorf("%w: unknown lease-expiry mode %q", ErrInvalidClaim, c.OnLeaseExpiry)
	}
	return nil
}

// Result is what a claim met.
type Result struct {
	// Won is true when the caller now holds the key with its Token.
	Won bool
	// TookOver is true when the claim was won from an abandoned one.
	TookOver bool
	// Existing is the stored row when the claim was lost.
	Existing Record
}

// Record is a stored key as a losing claim sees it.
type Record struct {
	State       State
	Operation   string
	Fingerprint []byte
	// LeaseRemaining is what was left of an in-flight lease when the row was
	// read; zero when unknown.
	LeaseRemaining time.Duration
	// Response is set for StateCompleted.
	Response *Response
}

// Response is a captured handler response.
type Response struct {
	Status int
	// Header holds only the headers the policy keeps for replay.
	Header http.Header
	Body   []byte
	// Omitted is true when the body exceeded the policy's MaxSnapshotBytes:
	// the record is completed without a body and replays are a 409
	// response-not-replayable naming Status.
	Omitted bool
}

// Store keeps idempotency keys. Every method is safe for concurrent use
// from many goroutines and, for SQL stores, from many processes.
type Store interface {
	// Claim atomically inserts an in-flight row for c, replaces an expired
	// one, applies c.OnLeaseExpiry to an abandoned one of the same request,
	// or reports the row that stands. It never waits on another claim.
	// What it waits for before it writes (a lock, a connection) it waits
	// for no longer than the wait context carried by ctx (WithWait), and
	// returns ErrWaitEnded, having written nothing, when that ends first.
	Claim(ctx context.Context, c Claim) (Result, error)
	// Complete stores resp for the claim held with token. ErrFenced when
	// token is not current.
	Complete(ctx context.Context, id Identity, token string, resp Response) error
	// Release deletes the claim held with token, so that a retry runs the
	// handler again. ErrFenced when token is not current.
	Release(ctx context.Context, id Identity, token string) error
	// Abandon applies mode to the claim held with token at once, as if its
	// lease had run out: Takeover ends the lease, FailClosed marks the key
	// indeterminate. ErrFenced when token is not current.
	Abandon(ctx context.Context, id Identity, token string, mode LeaseExpiry) error
}

// Transactor is a Store that can hold a claim inside a database transaction
// shared with the handler (docs/semantics.md §5).
type Transactor interface {
	Store
	// ClaimTx claims c inside a new transaction. When the claim is won, tx
	// is open and must be ended with Commit or Rollback; otherwise tx is nil.
	// It honours the wait context as Claim does.
	ClaimTx(ctx context.Context, c Claim) (res Result, tx Tx, err error)
	// Begin starts a plain transaction for a transactional operation that
	// runs without a key (the key is optional and absent), or whose
	// handler was seen writing around its transaction (the engine then
	// calls Begin only when the handler asks for the transaction). Its
	// Commit ignores the response and commits; its Rollback rolls back.
	// ctx bounds beginning. lease bounds the transaction as a claim's
	// lease bounds ClaimTx's: past it the store ends the transaction and
	// rolls it back, and Commit fails, so that a hung handler cannot hold
	// the database's locks (all of SQLite's writes) for ever.
	Begin(ctx context.Context, lease time.Duration) (Tx, error)
}

// Tx is an open transaction that holds a won claim.
type Tx interface {
	// Driver is the transaction the handler writes with: a pgx.Tx for
	// pgstore, a *sqlitestore.Tx for sqlitestore. Neither lets the handler
	// commit or roll back: Commit and Rollback do.
	Driver() any
	// Commit writes resp as the key's completion and commits it together
	// with the handler's writes. When the lease token is no longer current
	// it rolls everything back and returns ErrFenced.
	Commit(ctx context.Context, resp Response) error
	// Rollback rolls the handler's writes back, and the claim with them, so
	// that a retry runs the handler again. (Store.Release, by contrast,
	// deletes a claim held outside a transaction.)
	Rollback(ctx context.Context) error
}

// Sweeper deletes expired keys.
type Sweeper interface {
	// Sweep deletes at most limit expired rows and reports how many it
	// deleted. It never blocks claims for long, and may run from every
	// replica at once.
	Sweep(ctx context.Context, limit int) (int, error)
}
