package idemstore

import (
	"net/http"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/runtime/internal/headerclass"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Storable reports whether a response with status is stored for its key
// (docs/semantics.md §3.4): never 401, 403, 408, 425, 429, 502, 503 or 504, which
// say the request may succeed if sent again; other server errors only when
// the policy caches them (cacheServerErrors); everything else.
func Storable(status int, cacheServerErrors bool) bool {
	if slices.Contains(NeverStoredStatuses(), status) {
		return false
	}
	if status >= 500 {
		// 500 and the server errors the contract does not name (501, 505,
		// 507, …) say the server failed; they are kept only on request.
		return cacheServerErrors
	}
	return true
}

// NeverStoredStatuses lists, in order, the statuses whose responses are
// never stored (Storable): each says the request may succeed if sent
// again. Generated API docs list them from here.
func NeverStoredStatuses() []int {
	return []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooEarly,
		http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
}

// NeverStored says why a response header must never be stored and
// replayed, or returns "" when it may be. Such a header belongs to one
// client, one response or one hop, and a replay would hand it to another
// request. The engine refuses a policy that lists one, and the generator
// refuses a spec that does, with this reason.
func NeverStored(name string) string {
	h := http.CanonicalHeaderKey(name)
	switch {
	case h == "Set-Cookie", h == "Set-Cookie2":
		return "cookies belong to the client that got the first response; replaying them would hand one session to another request"
	case h == "Date":
		return "a replay carries a fresh Date"
	case headerclass.Framing(h):
		return "it describes one response's framing or one connection, and the server sets it anew"
	case h == problem.ReplayedHeader:
		return "the runtime sets it on every replay"
	case headerclass.PerAttempt(h):
		return "a trace or request id identifies the first request; a replay must carry its own"
	case headerclass.Credential(h):
		return "credentials, tokens and challenges belong to one client and one request"
	}
	lower := strings.ToLower(h)
	switch {
	case h == "Retry-After", h == "Ratelimit", strings.HasPrefix(lower, "x-ratelimit"), strings.HasPrefix(lower, "x-rate-limit"), strings.HasPrefix(lower, "ratelimit-"):
		return "rate-limit state is about the moment of the response and would be stale on a replay"
	}
	return ""
}
