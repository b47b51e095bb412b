package key

import (
	"net/http"

	"github.com/idemgen/idemgen/runtime/internal/headerclass"
)

// RefusedHeader says why the request header name can never carry an
// idempotency key, or returns "" when it may. A key read from such a
// header is never there for the engine (every request counts as
// keyless, so the policy never applies), differs on every attempt (a
// retry never finds its key), or is a credential (the key table and
// `idemgen keys` would keep every caller's secret). The engine refuses a
// policy whose key is in one, and the generator refuses a spec that puts
// it there, with this reason.
func RefusedHeader(name string) string {
	h := http.CanonicalHeaderKey(name)
	switch {
	case h == "Host", h == "Expect":
		return "net/http's server takes it out of the request's headers (Host into Request.Host, Expect into its own handling), so the engine would never see a key and every request would run unprotected"
	case headerclass.Framing(h):
		return "it describes the message's framing or one connection: net/http's server takes Transfer-Encoding and Trailer out of the request's headers, and proxies drop the hop-by-hop ones, so the engine would never see a key"
	case headerclass.Credential(h):
		return "it carries a credential, which would be stored as the key and shown by idemgen keys"
	case headerclass.PerAttempt(h):
		return "a trace or request id is set anew for every attempt, so a retry would never find its key"
	}
	return ""
}
