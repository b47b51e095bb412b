package idem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The problem type names of docs/semantics.md §3.8. Each is appended to the engine's
// ProblemBase to form the RFC 9457 type URI; they are stable and documented
// in docs/http.md, so clients may switch on them.
const (
	ProblemMissingKey           = "missing-idempotency-key"
	ProblemInvalidKey           = "invalid-idempotency-key"
	ProblemKeyReused            = "idempotency-key-reused"
	ProblemInProgress           = "request-in-progress"
	ProblemOutcomeUnknown       = "outcome-unknown"
	ProblemNotReplayable        = "response-not-replayable"
	ProblemStoreUnavailable     = "idempotency-store-unavailable"
	ProblemInvalidBody          = "invalid-request-body"
	ProblemBodyTooLarge         = "request-body-too-large"
	ProblemUnsupportedMediaType = "unsupported-media-type"
	ProblemTenantUnresolved     = "tenant-unresolved"
	ProblemTransactionMissing   = "transaction-unavailable"
	ProblemHandlerFailed        = "handler-failed"
	ProblemRouteMismatch        = "route-mismatch"
	ProblemNonCanonicalPath     = "non-canonical-path"
	ProblemMethodNotAllowed     = "method-not-allowed"
	ProblemResponseUnreadable   = "stored-response-unreadable"
	ProblemClientGone           = "client-gone"
	defaultProblemBase          = "https://idemgen.dev/problems/"
	problemContentType          = "application/problem+json"
	headerIdempotentReplayed    = "Idempotent-Replayed"
	headerRetryAfter            = "Retry-After"
	storeUnavailableRetryAfter  = 2
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	// Type is the full type URI.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header in
	// whole seconds. It is not part of the JSON body.
	RetryAfter int `json:"-"`
}

// Write sends p as application/problem+json.
func (p Problem) Write(w http.ResponseWriter) {
	body, err := json.Marshal(p)
	if err != nil {
		// A Problem holds only strings and ints; Marshal cannot fail.
		panic(err)
	}
	h := w.Header()
	h.Set("Content-Type", problemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if p.RetryAfter > 0 {
		h.Set(headerRetryAfter, strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// problem builds the Problem of one of the engine's own answers.
func (e *Engine) problem(name string, status int, title, detail string) Problem {
	return Problem{Type: e.problemBase + name, Title: title, Status: status, Detail: detail}
}
