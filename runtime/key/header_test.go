package key

import "testing"

// TestRefusedHeader: the headers a key can never be read from are
// refused in any case, with a reason, and ordinary key headers are not.
func TestRefusedHeader(t *testing.T) {
	for _, h := range []string{"Host", "expect", "Transfer-Encoding", "Trailer", "Connection", "Te",
		"Authorization", "cookie", "Proxy-Authorization", "X-Request-Id", "Traceparent", "X-Correlation-Id"} {
		if RefusedHeader(h) == "" {
			t.Errorf("RefusedHeader(%q) = \"\"; want a reason", h)
		}
	}
	for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key", "X-Request-Key", "I-Idempotency-Token", "Idempotency-Token", "X-Client-Key"} {
		if why := RefusedHeader(h); why != "" {
			t.Errorf("RefusedHeader(%q) = %q; want \"\"", h, why)
		}
	}
}
