package idemclient

import (
	"context"
	"net/http"
	"slices"
	"strings"
)

// EffectKeyHeader is the header an effect key travels in to a downstream
// outside the Transport's table: the name Stripe, Adyen and the IETF
// draft (draft-ietf-httpapi-idempotency-key-header) share.
const EffectKeyHeader = "Idempotency-Key"

type effectKeyKey struct{}

// WithEffectKey returns a context whose calls carry key, an effect key of
// the server's request (idem.EffectKey), so that however often the
// server's handler runs for that request the downstream acts once. A call
// to an operation of the Transport's table sends it as its idempotency key
// (as WithKey does, which it overrides); any other call sends it as its
// Idempotency-Key header, once, as the call would be sent anyway: a retry
// of the handler is the retry of that call. A call to an Unprotected
// operation of the table carries no effect key: its handler ignores keys,
// and net/http's Transport counts a request with that header as safe to
// send again. A request that already
// carries its own key or Idempotency-Key header keeps it.
func WithEffectKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, effectKeyKey{}, key)
}

// withoutEffectKey returns a context under which calls carry no effect
// key.
func withoutEffectKey(ctx context.Context) context.Context {
	return context.WithValue(ctx, effectKeyKey{}, "")
}

func effectKeyFrom(ctx context.Context) string {
	k, _ := ctx.Value(effectKeyKey{}).(string)
	return k
}

// withEffectHeader returns req, or a clone of it carrying its context's
// effect key as its Idempotency-Key header when it carries none.
func withEffectHeader(req *http.Request) *http.Request {
	if !wantsEffectHeader(req) {
		return req
	}
	out := req.Clone(req.Context())
	setEffectHeader(out)
	return out
}

// setEffectHeader sets r's Idempotency-Key header to its context's effect
// key when it carries none; r is the Transport's own clone.
func setEffectHeader(r *http.Request) {
	if wantsEffectHeader(r) {
		// An empty header of the caller's, in any spelling, gives way.
		for k := range r.Header {
			if strings.EqualFold(k, EffectKeyHeader) {
				delete(r.Header, k)
			}
		}
		r.Header.Set(EffectKeyHeader, effectKeyFrom(r.Context()))
	}
}

// wantsEffectHeader reports whether r is to carry its context's effect
// key: it has one and carries no Idempotency-Key value of its own, in any
// spelling of the name (a caller may set the map directly, as
// "idempotency-key", and net/http sends every spelling).
func wantsEffectHeader(r *http.Request) bool {
	if effectKeyFrom(r.Context()) == "" {
		return false
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, EffectKeyHeader) && slices.ContainsFunc(vs, func(v string) bool { return v != "" }) {
			return false
		}
	}
	return true
}
