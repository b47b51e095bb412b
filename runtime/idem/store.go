package idem

import (
	"crypto/sha256"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// The store's side of the engine is defined in runtime/idemstore, which
// stores and the operator's tools import without importing the engine.
// These names stand for it, so that a service configures the engine from
// this package alone.

// Store keeps idempotency keys: idemstore.Store.
type Store = idemstore.Store

// Transactor is a Store that can hold a claim inside a database
// transaction shared with the handler: idemstore.Transactor.
type Transactor = idemstore.Transactor

// Tx is an open transaction that holds a won claim: idemstore.Tx.
type Tx = idemstore.Tx

// Sweeper deletes expired keys: idemstore.Sweeper.
type Sweeper = idemstore.Sweeper

// Identity is one row's (tenant, scope, key): idemstore.Identity.
type Identity = idemstore.Identity

// Claim asks a store to claim a key for one request: idemstore.Claim.
type Claim = idemstore.Claim

// Result is what a claim met: idemstore.Result.
type Result = idemstore.Result

// Record is a stored key as a losing claim sees it: idemstore.Record.
type Record = idemstore.Record

// Response is a captured handler response: idemstore.Response.
type Response = idemstore.Response

// State is the state of a stored key: idemstore.State.
type State = idemstore.State

// The states a stored key can be in.
const (
	StateInFlight      = idemstore.StateInFlight
	StateCompleted     = idemstore.StateCompleted
	StateIndeterminate = idemstore.StateIndeterminate
)

// LeaseExpiry says what a retry meets when it finds an abandoned claim:
// idemstore.LeaseExpiry.
type LeaseExpiry = idemstore.LeaseExpiry

// The two answers to an abandoned claim.
const (
	// Takeover re-claims the key with a new lease token and runs the handler
	// again. Safe when the handler's effects are transactional.
	Takeover = idemstore.Takeover
	// FailClosed marks the key indeterminate; an operator resolves it.
	FailClosed = idemstore.FailClosed
)

// The errors stores return, as defined in runtime/idemstore.
var (
	// ErrFenced: idemstore.ErrFenced.
	ErrFenced = idemstore.ErrFenced
	// ErrOutcomeUnknown: idemstore.ErrOutcomeUnknown.
	ErrOutcomeUnknown = idemstore.ErrOutcomeUnknown
	// ErrInvalidClaim: idemstore.ErrInvalidClaim.
	ErrInvalidClaim = idemstore.ErrInvalidClaim
	// ErrUnreadable: idemstore.ErrUnreadable.
	ErrUnreadable = idemstore.ErrUnreadable
	// ErrWaitEnded: idemstore.ErrWaitEnded.
	ErrWaitEnded = idemstore.ErrWaitEnded
)

// Sealer seals stored responses: idemstore.Sealer.
type Sealer = idemstore.Sealer

// SealKey is one AES-256 key of an AESGCM sealer: idemstore.SealKey.
type SealKey = idemstore.SealKey

// AESGCM seals with AES-256-GCM: idemstore.AESGCM.
type AESGCM = idemstore.AESGCM

// NewAESGCM returns a sealer over keys, newest first: idemstore.NewAESGCM.
func NewAESGCM(keys ...SealKey) (*AESGCM, error) { return idemstore.NewAESGCM(keys...) }

// SealResponse is resp as the store keeps it under s:
// idemstore.SealResponse.
func SealResponse(s Sealer, id Identity, resp Response) (Response, error) {
	return idemstore.SealResponse(s, id, resp)
}

// OpenResponse gives back the response SealResponse stored for id:
// idemstore.OpenResponse.
func OpenResponse(s Sealer, id Identity, stored Response) (Response, error) {
	return idemstore.OpenResponse(s, id, stored)
}

// KeyLabel is how a key appears in the engine's logs: idemstore.KeyLabel.
func KeyLabel(secret []byte, k string) string { return idemstore.KeyLabel(secret, k) }

// StoredKey is k as a store keeps it under secret: idemstore.StoredKey.
func StoredKey(secret []byte, k string) string { return idemstore.StoredKey(secret, k) }

// IsStoredHMAC reports whether a stored key is the HMAC of a client's key:
// idemstore.IsStoredHMAC.
func IsStoredHMAC(stored string) bool { return idemstore.IsStoredHMAC(stored) }

// StoredKeyLabel is the label of a stored key: idemstore.StoredKeyLabel.
func StoredKeyLabel(secret []byte, stored string) string {
	return idemstore.StoredKeyLabel(secret, stored)
}

// StoredFingerprint is a request's fingerprint as a store keeps it under
// secret: idemstore.StoredFingerprint.
func StoredFingerprint(secret []byte, sum [sha256.Size]byte) [sha256.Size]byte {
	return idemstore.StoredFingerprint(secret, sum)
}

// Storable reports whether a response with status is stored for its key
// (docs/semantics.md §3.4): idemstore.Storable.
func Storable(status int, cacheServerErrors bool) bool {
	return idemstore.Storable(status, cacheServerErrors)
}

// NeverStoredStatuses lists the statuses whose responses are never
// stored: idemstore.NeverStoredStatuses.
func NeverStoredStatuses() []int { return idemstore.NeverStoredStatuses() }

// NeverStored says why a response header must never be stored and
// replayed, or returns "": idemstore.NeverStored.
func NeverStored(name string) string { return idemstore.NeverStored(name) }
