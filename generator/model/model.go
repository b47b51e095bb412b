// Package model is the policy model between the generator's loader and its
// emitters: plain, sorted Go values with source positions. Nothing here
// refers to kin-openapi or jennifer, so every emitter depends on this
// package alone.
package model

import (
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// Pos is a position in a spec file, 1-based.
type Pos struct {
	// File is the spec path as the user gave it (relative where possible).
	File string
	Line int
	Col  int
}

// Spec is everything the emitters need from one OpenAPI document.
type Spec struct {
	// Source is the spec path as the user gave it, used in headers.
	Source string
	// Title and Version come from the document's info object.
	Title   string
	Version string
	// BasePath is the prefix the service is served under ("/v71"), which
	// the engine strips before it matches a request path: from the
	// configuration, else from the spec's servers; "" at the root.
	BasePath string
	// Operations are the operations that carry a policy, sorted by Path then
	// Method.
	Operations []Operation
	// Unprotected are the operations without a policy whose paths a
	// protected operation's template of the same method also matches, and
	// which are more specific than it (POST /pay/batch beside a protected
	// POST /pay/{id}): the router sends such a path to them, so the engine
	// must pass it through. Sorted by Path then Method.
	Unprotected []Route
}

// Route is an operation without a policy.
type Route struct {
	Method string
	Path   string
	// ID is its operationId, "" when it has none.
	ID string
}

// Operation is one annotated operation with its effective policy.
type Operation struct {
	// ID is the operationId, or a stable name derived from method and path
	// when the spec has none.
	ID string
	// DerivedID is true when ID was derived.
	DerivedID bool
	// GoName is ID as an exported Go identifier ("createTransfer" →
	// "CreateTransfer"), unique within the spec.
	GoName  string
	Method  string // POST or PATCH
	Path    string // the path template
	Summary string
	Pos     Pos // the operation's x-idempotency (or its method key)
	// Item are the member names from the spec's root to the path item
	// that holds the operation: "paths" and Path, or where the path
	// item's $refs lead ("components", "pathItems", "Pay").
	Item []string

	Policy Policy
	// ScopeID is the operation name its keys are stored under: ID, or
	// the x-idempotency previousOperationId of a renamed operation, so
	// that keys stored before the rename still match.
	ScopeID string
	// FieldPos says where each policy setting was decided, by extension
	// field name ("scope", "ttl", …, and "operationId"): the field itself,
	// the document default it came from, or Pos for a built-in default.
	// Reports about a changed setting point there.
	FieldPos map[string]Pos
	// PathParams are the path template's parameter names in template order.
	PathParams []string
	// BodyMediaType is "application/json", "application/x-www-form-urlencoded"
	// or "" when the operation declares no request body.
	BodyMediaType string
}

// Policy is the effective policy: document defaults merged with the
// operation's overrides, every default resolved.
type Policy struct {
	Scope        Scope
	KeyIn        key.In
	KeyName      string // header/query name, or JSON Pointer for a body key
	KeyMaxLength int
	Required     bool

	TTL               time.Duration
	Lease             time.Duration
	ClientRetryBudget time.Duration // zero when not set

	MaxSnapshotBytes  int64
	ReplayHeaders     []string // canonical header names, sorted
	CacheServerErrors bool
	OnLeaseExpiry     LeaseExpiry
	Transactional     bool

	// Fingerprint lists the fingerprinted body fields, sorted by pointer;
	// empty means the whole body.
	Fingerprint []Field
	// Query lists the fingerprinted query parameters, sorted.
	Query []string

	// Effects are the declared effects outside the database, sorted by
	// name (docs/effects.md).
	Effects []Effect
}

// Effect is one declared effect of an operation and what its downstream
// promises about the keys it is sent.
type Effect struct {
	Name string
	// GoName is Name as the tail of an exported Go identifier
	// ("receipt-email" → "ReceiptEmail").
	GoName        string
	KeyRetention  time.Duration // zero when not declared
	MaxKeyLength  int           // zero when not declared
	RecoveryPoint bool
	// Pos is the entry's position; RetentionPos and LengthPos its
	// keyRetention's and maxKeyLength's, where a diagnostic about them
	// points.
	Pos, RetentionPos, LengthPos Pos
}

// Scope is what a key is unique within. The values are the runtime's
// (idem.Scope), as the extension spells them; a test holds the two equal.
type Scope string

// The scopes of docs/semantics.md §1.
const (
	// ScopeOperation makes a key unique per (tenant, operation).
	ScopeOperation Scope = "operation"
	// ScopeTenant makes a key unique per tenant across operations.
	ScopeTenant Scope = "tenant"
)

// Scopes lists every scope, in the order the extension's docs give them.
func Scopes() []Scope { return []Scope{ScopeOperation, ScopeTenant} }

// LeaseExpiry is what a claim does to an abandoned claim of the same
// request whose lease ran out. The values are the runtime's
// (idemstore.LeaseExpiry), as the extension spells them.
type LeaseExpiry string

// The lease-expiry modes of docs/semantics.md §3.5.
const (
	// Takeover claims the key again and runs the handler.
	Takeover LeaseExpiry = "takeover"
	// FailClosed marks the key indeterminate for an operator.
	FailClosed LeaseExpiry = "fail-closed"
)

// LeaseExpiries lists every lease-expiry mode.
func LeaseExpiries() []LeaseExpiry { return []LeaseExpiry{Takeover, FailClosed} }

// FieldType is a fingerprinted field's schema type.
type FieldType string

// Schema types, mirroring runtime/fingerprint.Type.
const (
	TypeAny     FieldType = "any"
	TypeString  FieldType = "string"
	TypeNumber  FieldType = "number"
	TypeInteger FieldType = "integer"
	TypeBoolean FieldType = "boolean"
	TypeObject  FieldType = "object"
	TypeArray   FieldType = "array"
)

// Field is one fingerprinted body field.
type Field struct {
	Pointer string
	Type    FieldType
	Pos     Pos
}

// Severity says whether a diagnostic stops generation.
type Severity int

// Diagnostic severities.
const (
	Error Severity = iota
	Warning
)

// Diagnostic is one problem found in a spec.
type Diagnostic struct {
	Severity Severity
	Pos      Pos
	// Operation is "POST /transfers (createTransfer)", or "" for document
	// level problems.
	Operation string
	// Field is the extension field, such as "x-idempotency.ttl"; "" when the
	// problem is not about one field.
	Field string
	// Message says what is wrong and how to fix it.
	Message string
}
