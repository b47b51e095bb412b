package server

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The problem type names the service itself answers with; the idempotency
// layer adds its own (missing-idempotency-key, idempotency-key-reused, …).
const (
	ProblemUnauthorized        = "unauthorized"
	ProblemRateLimited         = "rate-limited"
	ProblemValidation          = "validation-error"
	ProblemNotFound            = "not-found"
	ProblemMethodNotAllowed    = "method-not-allowed"
	ProblemBodyTooLarge        = "request-body-too-large"
	ProblemInternal            = "internal-error"
	ProblemDatabaseUnavailable = "database-unavailable"
	ProblemUpstreamUnavailable = "upstream-unavailable"
	// ProblemClientGone answers a request whose client hung up before its
	// answer, the idempotency layer's name for it (runtime/problem's
	// ClientGone).
	ProblemClientGone = "client-gone"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

var problemTitles = map[string]string{
	ProblemUnauthorized:        "Unauthorized",
	ProblemRateLimited:         "Too many requests",
	ProblemValidation:          "The request is not valid",
	ProblemNotFound:            "Not found",
	ProblemMethodNotAllowed:    "Method not allowed",
	ProblemBodyTooLarge:        "Request body too large",
	ProblemInternal:            "Internal error",
	ProblemDatabaseUnavailable: "Database unavailable",
	ProblemUpstreamUnavailable: "A service the request needs is unavailable",
	ProblemClientGone:          "Client gone",
	"currency-mismatch":        "Currencies do not match",
	"insufficient-funds":       "Insufficient funds",
	"pet-unavailable":          "Pet unavailable",
}

// writeProblem answers with an application/problem+json body. retryAfter,
// when positive, is sent as Retry-After in whole seconds.
func (s *Server) writeProblem(w http.ResponseWriter, status int, name, detail string, retryAfter int) {
	title := problemTitles[name]
	if title == "" {
		title = http.StatusText(status)
	}
	body, _ := json.Marshal(problem{Type: s.problemBase + name, Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Every value the service answers with is plain data.
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
