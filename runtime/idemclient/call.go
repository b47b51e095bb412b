package idemclient

import (
	"context"
	"time"
)

// Report is what one logical call did. The Transport fills the Report a
// caller registered with WithReport when RoundTrip returns.
//
// A call that an http.Client redirects (a 307 or 308) reaches RoundTrip
// once per hop; each hop's report covers the hops before it, so the one
// left after the call (in WithReport's Report, or the last given to
// OnCall) is the whole call's.
type Report struct {
	// Operation is the ID of the table's operation the call was made to,
	// or "" when it called none. A redirected call keeps the operation of
	// its first hop that called one.
	Operation string
	// Key is the idempotency key the call was made with, sent with every
	// attempt and on every hop of a redirect that keeps the method, or ""
	// when none was.
	Key string
	// Attempts counts the requests sent, the first included, on every hop.
	Attempts int
	// Redirects counts the redirects followed before the final answer.
	Redirects int
	// Replayed is true when the final answer, to a request sent with a
	// key, carried "Idempotent-Replayed: true": the server answered from
	// its record of an earlier attempt and did not run the operation
	// again. Such an answer is final whatever its status, so GaveUp is
	// false. Replayed is never true for a request sent without a key.
	Replayed bool
	// Status is the final answer's status code, 0 when there was none.
	Status int
	// GaveUp is true when the retries stopped (attempts, retry budget or
	// Retry-After beyond the budget) while the last outcome still called
	// for a retry: the caller does not know whether the operation ran, and
	// may call again later with the same key (WithKey) while the server
	// still remembers it.
	GaveUp bool
}

type ctxKey int

const (
	keyKey ctxKey = iota
	reportKey
	timeoutKey
	hopKey
)

// WithKey returns a context whose calls send key as their idempotency key
// instead of a fresh one. Use it to retry a logical call across process
// restarts or from a queue: every call made with the same key is the same
// request to the server. A request that already carries a key (a header
// or query parameter the caller set, a body member) keeps its own.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyKey, key)
}

// WithReport returns a context whose call fills r when it returns. A
// context serves one call at a time: two calls sharing it race on r.
func WithReport(ctx context.Context, r *Report) context.Context {
	return context.WithValue(ctx, reportKey, r)
}

// WithAttemptTimeout returns a context whose call gives each attempt at
// most d before abandoning it and retrying, instead of the Transport's
// AttemptTimeout.
func WithAttemptTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, timeoutKey, d)
}

func keyFrom(ctx context.Context) string {
	k, _ := ctx.Value(keyKey).(string)
	return k
}

func reportFrom(ctx context.Context) *Report {
	r, _ := ctx.Value(reportKey).(*Report)
	return r
}

func attemptTimeoutFrom(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Value(timeoutKey).(time.Duration); ok {
		return d
	}
	return def
}
