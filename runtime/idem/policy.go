package idem

import (
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
)

// Scope says across which operations a key is unique.
type Scope string

// The scopes of docs/semantics.md §1.
const (
	// ScopeOperation makes a key unique per (tenant, operation).
	ScopeOperation Scope = "operation"
	// ScopeTenant makes a key unique per tenant across operations; reusing a
	// key on another operation is a 422.
	ScopeTenant Scope = "tenant"
)

// KeySource names where the key is read from.
type KeySource struct {
	In key.In
	// Name is the header or query-parameter name, or for a body key the JSON
	// Pointer of the property ("/idempotency_key").
	Name string
}

// Policy is the x-idempotency policy of one operation, as the generator
// writes it. Every field is set explicitly: defaults are resolved at
// generate time so that a reviewer reads the effective policy.
type Policy struct {
	// OperationID names the operation (the spec's operationId, or a stable
	// name derived from method and path).
	OperationID string
	// Method is the HTTP method, POST or PATCH.
	Method string
	// Path is the OpenAPI path template, such as "/pets/{pet_id}/adoptions".
	Path string
	// ScopeID is the operation name stored keys carry (the claim's scope
	// and Operation); "" means OperationID. A renamed operation keeps its
	// former ID here, so that keys stored before the rename still match
	// and a retry sent across the deploy is replayed, not run again.
	ScopeID string

	Scope        Scope
	Key          KeySource
	KeyMaxLength int
	// Required makes a request without a key a 400; otherwise such a request
	// runs without idempotency.
	Required bool

	// TTL is how long a key is remembered after its first use.
	TTL time.Duration
	// Lease is how long an in-flight claim is held before it counts as
	// abandoned: at least a microsecond (Claim.Check), shorter than TTL.
	Lease time.Duration

	// MaxSnapshotBytes is the largest response body kept for replay.
	MaxSnapshotBytes int64
	// ReplayHeaders are stored and replayed on top of AlwaysReplayed.
	ReplayHeaders []string
	// CacheServerErrors stores and replays a 500 produced by the handler.
	CacheServerErrors bool

	OnLeaseExpiry idemstore.LeaseExpiry
	// Transactional runs the handler inside the store's transaction, which
	// also writes the key's completion.
	Transactional bool

	// Fingerprint says which parts of the request define the same request.
	Fingerprint fingerprint.Spec
	// Effects are the effects outside the database the operation's
	// handler makes, as its x-idempotency.effects declares them
	// (docs/effects.md).
	Effects []Effect
}
