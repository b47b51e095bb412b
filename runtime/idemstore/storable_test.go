package idemstore

import "testing"

// TestNeverStoredHeaders: a response header that carries a credential or
// a token, or identifies one attempt, is never stored, and the headers a
// policy replays are.
func TestNeverStoredHeaders(t *testing.T) {
	for _, h := range []string{"Set-Cookie", "Www-Authenticate", "X-Api-Key", "X-Auth-Token", "X-Csrf-Token",
		"X-Amz-Security-Token", "Cf-Ray", "X-Amz-Cf-Id", "X-Amzn-Requestid", "X-Request-Id", "X-RateLimit-Remaining"} {
		if NeverStored(h) == "" {
			t.Errorf("NeverStored(%q) = \"\"; want a reason", h)
		}
	}
	for _, h := range []string{"Etag", "X-Refund-Reference", "Idempotency-Token", "Cache-Control"} {
		if why := NeverStored(h); why != "" {
			t.Errorf("NeverStored(%q) = %q; want \"\"", h, why)
		}
	}
}
