package idemstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// MaxPhaseResult bounds the result a store records for one phase: a
// recovery point keeps what the handler needs to go on (a charge's id and
// status), not a document.
const MaxPhaseResult = 64 << 10

// ErrPhaseResultTooLarge is wrapped by the error of a phase whose result is
// longer than MaxPhaseResult. Nothing was recorded.
var ErrPhaseResultTooLarge = errors.New("idemstore: a phase's result is larger than a store records")

// PhaseStore is a Store that keeps recovery points (docs/semantics.md
// §8.2): the result of each named phase of a request, recorded on its own
// the moment the phase ends, so that a later run of the request (a retry
// after a release, a takeover after a crash) receives it instead of
// running the phase again.
//
// A phase is named by an identity of its request and its name: the engine
// gives the tenant, the scope, and as the key the client's key and the
// request's fingerprint as its effect secret (idem.Config.EffectSecret)
// stores them, so that a rotation does not lose it and a reused key does
// not find it (docs/semantics.md §8.1). Its record is not fenced by a lease
// token and not removed by Release or Abandon: whoever records a phase
// first sets its result for good, and the record lives ttl from when it was
// made, by the store's clock, after which Sweep deletes it as it deletes
// expired keys. The engine gives as ttl the operation's ttl and lease, so
// that every run of a retry sent within the ttl meets it (docs/semantics.md
// §8.2): a store keeps it as long as it is told, no longer and no shorter.
type PhaseStore interface {
	Store
	// LoadPhase returns the recorded result of phase name of the request
	// stored under id; found is false when none is recorded (or it expired).
	LoadPhase(ctx context.Context, id Identity, name string) (result []byte, found bool, err error)
	// RecordPhase records result as phase name's unless a result is
	// recorded already, and returns the result that stands: result, or
	// the one recorded first. It commits on its own, apart from any
	// transaction of the store that holds the request's claim.
	RecordPhase(ctx context.Context, id Identity, name string, result []byte, ttl time.Duration) (stored []byte, err error)
	// PhasesBesideTx reports whether RecordPhase can commit while one of
	// the store's transactions holds a claim (Transactor): true where the
	// record takes a connection of its own (PostgreSQL), false where that
	// transaction holds the database's only write lock (SQLite).
	PhasesBesideTx() bool
}

// CheckPhase reports why a store must not record a phase: an empty name,
// a result over MaxPhaseResult, a ttl under a millisecond. Every store
// applies it first, so they all refuse the same records.
func CheckPhase(name string, result []byte, ttl time.Duration) error {
	switch {
	case name == "":
		return errors.New("idemstore: a phase needs a name")
	case len(result) > MaxPhaseResult:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrPhaseResultTooLarge, len(result), MaxPhaseResult)
	case ttl < time.Millisecond:
		return fmt.Errorf("idemstore: a phase's ttl %v is under a millisecond", ttl)
	}
	return nil
}

// PhaseIdentity is the identity a request's phases are recorded and its
// effect keys derived under, from its identity, its operation (the row's
// Operation, which is the scope of a key not shared across operations)
// and its fingerprint as the engine's effect secret stores them (for a
// row written under that secret, the row's own): the operation as the
// scope, so that one key reused for another operation under a
// tenant-wide scope names other phases and other effect keys; and the
// key, a space, which no key holds (docs/semantics.md §2), and the
// fingerprint in hex. A key that expired and was reused for another
// request names other phases.
func PhaseIdentity(id Identity, operation string, fingerprint []byte) Identity {
	id.Scope = operation
	id.Key += " " + hex.EncodeToString(fingerprint)
	return id
}

// PhaseRecord is one recorded phase, as an operator lists it.
type PhaseRecord struct {
	Name string
	// Bytes is the size of the result as stored (sealed, under a Sealer).
	Bytes int
	// RecordedAt and ExpiresAt are by the store's clock; RecordedAt is
	// zero where the store does not keep it (Redis).
	RecordedAt, ExpiresAt time.Time
}

// PhaseLister is a PhaseStore that lists the phases recorded under an
// identity (PhaseIdentity), by name, for the operator's tools.
type PhaseLister interface {
	ListPhases(ctx context.Context, id Identity) ([]PhaseRecord, error)
}
