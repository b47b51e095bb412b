package key

import "testing"

// RefusedHeader refuses Authorization, Cookie and Proxy-Authorization as
// credentials, and trace and request ids as per-attempt, by a list of
// names. Widespread credential headers (API keys, session and CSRF
// tokens) and per-attempt ids set by CDNs are not on it: a policy whose
// key is an API key stores every caller's secret as its key (shown by
// idemgen keys), and one whose key is Cloudflare's CF-Ray never finds its
// key on a retry.
func TestCommonCredentialAndAttemptHeadersAreRefused(t *testing.T) {
	for _, name := range []string{"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Csrf-Token", "X-Xsrf-Token", "X-Amz-Security-Token", "Cf-Ray", "X-Amz-Cf-Id"} {
		if RefusedHeader(name) == "" {
			t.Errorf("RefusedHeader(%q) = \"\", want a credential or a per-attempt id refused", name)
		}
	}
}
