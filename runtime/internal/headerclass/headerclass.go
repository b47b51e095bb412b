// Package headerclass sorts HTTP header names by what they carry, so that
// each rule that refuses a header somewhere (a response header stored and
// replayed, idemstore.NeverStored; a request header that carries a key,
// key.RefusedHeader) reads one list per kind of header. Names are taken
// in any case.
package headerclass

import (
	"net/http"
	"strings"
)

// Framing reports whether name describes one message's framing or one
// connection: the server sets it anew on every response, net/http's server
// takes Transfer-Encoding and Trailer out of a request's headers, and a
// proxy drops the hop-by-hop ones (RFC 9110 §7.6.1).
func Framing(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Content-Length", "Transfer-Encoding", "Trailer", "Connection",
		"Keep-Alive", "Upgrade", "Te", "Proxy-Authenticate", "Proxy-Connection", "Alt-Svc":
		return true
	}
	return false
}

// Credential reports whether name carries a credential or a challenge,
// which belong to one request and one client: the HTTP ones, an API key
// (X-Api-Key, Api-Key, any name holding api-key or apikey), a session,
// access or security token (any name ending -token, X-Auth-Token,
// X-Amz-Security-Token), an anti-forgery token (any name holding csrf or
// xsrf) or a secret. A name that holds idempotency is an idempotency key
// (Idempotency-Token), not a credential.
func Credential(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Www-Authenticate", "Authorization", "Cookie", "Proxy-Authorization":
		return true
	}
	lower := strings.ToLower(name)
	if strings.Contains(lower, "idempoten") {
		return false
	}
	return strings.Contains(lower, "api-key") || strings.Contains(lower, "apikey") || strings.Contains(lower, "api_key") ||
		strings.HasSuffix(lower, "-token") || strings.HasSuffix(lower, "_token") ||
		strings.Contains(lower, "csrf") || strings.Contains(lower, "xsrf") ||
		strings.Contains(lower, "secret") || strings.Contains(lower, "password")
}

// PerAttempt reports whether name identifies one attempt of a request: a
// trace context, a request or correlation id, which a client, a gateway,
// a CDN or a tracer sets anew for each attempt.
func PerAttempt(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Traceparent", "Tracestate", "B3", "Request-Id", "Uber-Trace-Id", "Sentry-Trace", "Baggage", "Server-Timing",
		"Cf-Ray", "X-Amz-Cf-Id", "X-Amz-Id-2", "X-Amzn-Trace-Id", "X-Cloud-Trace-Context", "X-Vercel-Id",
		"X-Azure-Ref", "X-Msedge-Ref", "X-Appengine-Request-Log-Id":
		return true
	}
	lower := strings.ToLower(name)
	return strings.HasPrefix(lower, "x-b3-") || strings.Contains(lower, "trace-id") || strings.Contains(lower, "traceid") ||
		strings.Contains(lower, "request-id") || strings.Contains(lower, "requestid") || strings.Contains(lower, "correlation-id")
}
