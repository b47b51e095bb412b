// Package problem is the one table of the answers the idempotency engine
// gives in place of (or after) a handler: RFC 9457 problem types, each with
// its status, title and detail. The engine (runtime/idem) answers with
// them, runtime/idemclient tells them apart by name, and the generator's
// OpenAPI overlay and API docs describe them, all from this table; the
// header that marks a replayed answer is here too. It
// imports nothing but the standard library, so that a client binary
// carries no server.
package problem

import (
	"fmt"
	"net/http"
	"strconv"
)

// DefaultBase is the base a type URI is written under unless a server
// configures its own: the URI is the base followed by the name.
const DefaultBase = "https://idemgen.dev/problems/"

// ReplayedHeader is the header the engine sets, "true", on every response
// it replays from the store in place of the handler (docs/semantics.md
// §3.5); a stored response never keeps it.
const ReplayedHeader = "Idempotent-Replayed"

// The problem type names. Each is appended to the engine's problem base to
// form the type URI; they are stable, so clients may switch on them.
const (
	MissingKey           = "missing-idempotency-key"
	InvalidKey           = "invalid-idempotency-key"
	KeyReused            = "idempotency-key-reused"
	InProgress           = "request-in-progress"
	OutcomeUnknown       = "outcome-unknown"
	NotReplayable        = "response-not-replayable"
	StoreUnavailable     = "idempotency-store-unavailable"
	InvalidBody          = "invalid-request-body"
	BodyReadInFront      = "request-body-read-in-front"
	BodyTooLarge         = "request-body-too-large"
	UnsupportedMediaType = "unsupported-media-type"
	TenantUnresolved     = "tenant-unresolved"
	TransactionMissing   = "transaction-unavailable"
	HandlerFailed        = "handler-failed"
	RouteMismatch        = "route-mismatch"
	NonCanonicalPath     = "non-canonical-path"
	MethodNotAllowed     = "method-not-allowed"
	ResponseUnreadable   = "stored-response-unreadable"
	ClientGone           = "client-gone"
	Overloaded           = "server-overloaded"
)

// Answer is one of the engine's problem answers. Several answers may share
// a type name: the name says what a client should do, the detail says what
// happened.
type Answer int

// The answers, in the order a request can meet them.
const (
	// Refused before the engine's policy applies: a server at capacity
	// (runtime/idemshed).
	AtCapacity Answer = iota + 1
	// Refused before the engine could apply the operation's policy.
	RouteNotApplied
	PathNotCanonical
	PathRawUnescaped
	MethodRefused
	TenantNotResolved
	// Refused on admission: nothing was claimed.
	KeyRequired
	KeyInvalid
	BodyTaken
	BodyUnread
	BodyTooBig
	MediaTypeUnsupported
	BodyMalformed
	// A claim that met another request's row.
	KeyReusedRequest
	KeyReusedOperation
	ResponseTooLarge
	ResponseNotReadable
	StillRunning
	Interrupted
	// The client hung up before its claim or its handler.
	ClientLeft
	// The store, the transaction or the handler failed.
	StoreFailed
	TxNotBegun
	TxMissing
	HandlerPanicked
	HandlerSilent
	TakenOver
	CommitUnknown
	end
)

// row is one line of the table. Detail is a fmt format; its verbs are
// filled by Answer.Detail.
type row struct {
	name   string
	status int
	title  string
	detail string
	// meaning and advice tell a client what the answer says and what to
	// do; set on the one row per (status, name) that client docs list.
	meaning, advice string
}

// table is the answers' table; an answer's row is table[answer].
var table = [...]row{
	AtCapacity: {Overloaded, http.StatusServiceUnavailable, "Server overloaded",
		"The server is at capacity and did not process this request. Retry after the Retry-After delay; an idempotency key, if you sent one, was not used.", "", ""},
	RouteNotApplied: {RouteMismatch, http.StatusInternalServerError, "Request not routed to its policy",
		"The server could not apply this operation's idempotency policy to the request, so it did not run it. Contact support.", "", ""},
	PathNotCanonical: {NonCanonicalPath, http.StatusBadRequest, "Path not canonical",
		"The request path is not in canonical form (an empty or dot segment, a needless escape, an escaped \"/\" that routers read as a separator or not, or a parameter value holding the text that follows the parameter). Send it to %s exactly, with the same idempotency key.",
		"the path has an empty or dot segment or a needless escape; nothing ran", "send the path in canonical form, same key"},
	PathRawUnescaped: {NonCanonicalPath, http.StatusBadRequest, "Path not canonical",
		"The request path is spelled so that routers read it in different ways: a character that a URL must escape (a byte beyond ASCII, or one of \" < > \\ ^ ` { | }) left unescaped, or a + or one of ! ' ( ) * [ ] in a path written so. Send it with every character but letters, digits and - . _ ~ / percent-encoded, with the same idempotency key.", "", ""},
	MethodRefused: {MethodNotAllowed, http.StatusMethodNotAllowed, "Method not allowed",
		"This route takes %s for operation %s; the method %q was not run.", "", ""},
	TenantNotResolved: {TenantUnresolved, http.StatusInternalServerError, "Tenant not resolved",
		"The server could not tell which tenant this request belongs to, so it did not run it. Contact support.", "", ""},
	KeyRequired: {MissingKey, http.StatusBadRequest, "Idempotency key required",
		"This operation requires an idempotency key in %s. Send a unique key per logical request and reuse it on retries.",
		"the operation requires a key and the request had none", "send a key"},
	KeyInvalid: {InvalidKey, http.StatusBadRequest, "Invalid idempotency key",
		"%s. Send a key of 1 to %d characters.",
		"the key is empty, too long, has a character a key may not hold, or is sent twice", "fix the key"},
	BodyTaken: {BodyReadInFront, http.StatusInternalServerError, "Request body read before the idempotency engine",
		"The server read this request's body before it could check the idempotency key against it, so it did not run the request. Contact support; nothing ran.", "", ""},
	BodyUnread: {InvalidBody, http.StatusBadRequest, "Request body could not be read",
		"The request body could not be read completely. Retry with the same idempotency key.", "", ""},
	BodyTooBig: {BodyTooLarge, http.StatusRequestEntityTooLarge, "Request body too large",
		"The request body is larger than %d bytes.",
		"the body is larger than the server accepts", "send a smaller body"},
	MediaTypeUnsupported: {UnsupportedMediaType, http.StatusUnsupportedMediaType, "Unsupported media type",
		"This operation takes a body of type %s; send it with that Content-Type. The idempotency key was not used.",
		"the body's `Content-Type` is not the one the operation takes", "send the documented `Content-Type`; the key was not used"},
	BodyMalformed: {InvalidBody, http.StatusBadRequest, "Request body could not be read",
		"The request body is not well-formed (%s). Fix it and retry; the idempotency key was not used.",
		"the body is not well-formed JSON or form data; nothing ran", "fix the body; the key was not used"},
	KeyReusedRequest: {KeyReused, http.StatusUnprocessableEntity, "Idempotency key reused",
		"This idempotency key was already used for a different request. Use a new key for a new request.",
		"the key was used for a different request", "use a new key for a new request"},
	KeyReusedOperation: {KeyReused, http.StatusUnprocessableEntity, "Idempotency key reused",
		"This idempotency key was already used for another operation. Use a new key for a new request.", "", ""},
	ResponseTooLarge: {NotReplayable, http.StatusConflict, "Response not replayable",
		"The request with this key completed with status %d, but its response was too large to keep. Look the result up with a read request.",
		"the first response was too large to keep", "look the result up with a read request"},
	ResponseNotReadable: {ResponseUnreadable, http.StatusInternalServerError, "Stored response unreadable",
		"The server cannot read the stored result of the request with this key, so it did not resend it. Contact support; do not retry with a new key.", "", ""},
	StillRunning: {InProgress, http.StatusConflict, "Request in progress",
		"A request with this idempotency key is still being processed. Retry after the Retry-After delay with the same key.",
		"a request with this key is still running", "retry after `Retry-After` seconds"},
	Interrupted: {OutcomeUnknown, http.StatusConflict, "Outcome unknown",
		"A request with this idempotency key was interrupted and its outcome is unknown. Do not retry; contact support to resolve it.",
		"a request with this key stopped and its outcome is unknown", "contact support; do not retry with another key blindly"},
	ClientLeft: {ClientGone, http.StatusServiceUnavailable, "Client gone",
		"The client hung up before the request was processed; nothing was done. Retry with the same idempotency key.", "", ""},
	StoreFailed: {StoreUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The server could not record the idempotency key, so it cannot tell you whether the request was processed. Retry later with the same key: the retry runs it, or answers with its result if it was recorded.",
		"keys cannot be checked right now; the retry with the same key learns the outcome", "retry after `Retry-After` seconds, same key"},
	TxNotBegun: {StoreUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The server could not begin this request's transaction, so it did not process the request. Retry later with the same key.", "", ""},
	TxMissing: {TransactionMissing, http.StatusInternalServerError, "Transaction unavailable",
		"The server is misconfigured: operation %s must run behind the idempotency engine with a transactional store. Contact support.", "", ""},
	HandlerPanicked: {HandlerFailed, http.StatusInternalServerError, "Request failed",
		"The request failed inside the server. Retry with the same idempotency key; if the answer is an outcome-unknown problem, contact support.", "", ""},
	HandlerSilent: {HandlerFailed, http.StatusInternalServerError, "Request failed",
		"The server ended the request without an answer. Retry with the same idempotency key; if the answer is an outcome-unknown problem, contact support.", "", ""},
	TakenOver: {InProgress, http.StatusConflict, "Request in progress",
		"Another attempt with this idempotency key took over. Retry with the same key to get its result.", "", ""},
	CommitUnknown: {OutcomeUnknown, http.StatusInternalServerError, "Outcome unknown",
		"The server cannot confirm whether this request took effect. Do not retry; contact support to resolve it.", "", ""},
	end: {},
}

// Answers lists every answer, in the order of the table.
func Answers() []Answer {
	out := make([]Answer, 0, end-1)
	for a := Answer(1); a < end; a++ {
		out = append(out, a)
	}
	return out
}

// String is the answer as docs and messages cite it: its status and name,
// "409 request-in-progress".
func (a Answer) String() string { return strconv.Itoa(a.Status()) + " " + a.Name() }

// Name is the answer's problem type name.
func (a Answer) Name() string { return table[a].name }

// Status is the answer's HTTP status.
func (a Answer) Status() int { return table[a].status }

// Title is the answer's RFC 9457 title.
func (a Answer) Title() string { return table[a].title }

// Detail is the answer's RFC 9457 detail, its format's verbs filled with
// args.
func (a Answer) Detail(args ...any) string {
	if len(args) == 0 {
		return table[a].detail
	}
	return fmt.Sprintf(table[a].detail, args...)
}

// Format is the answer's detail before Detail fills its verbs.
func (a Answer) Format() string { return table[a].detail }

// Meaning says, for client docs, what the answer tells a client; "" for an
// answer the docs do not list (another answer of the same status and name
// speaks for it, or it reports a server fault a client cannot act on).
func (a Answer) Meaning() string { return table[a].meaning }

// RetryAfter reports whether the answer carries a Retry-After header: the
// answers that tell a client to come back with the same key.
func (a Answer) RetryAfter() bool {
	switch a {
	case AtCapacity, StillRunning, TakenOver, ClientLeft, StoreFailed, TxNotBegun:
		return true
	}
	return false
}

// Advice says, for client docs, what a client should do; set where
// Meaning is.
func (a Answer) Advice() string { return table[a].advice }
