package idemclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxAttempts = 8
	DefaultBudget      = 30 * time.Second
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
	// DefaultMaxBodyBytes is four times the largest request body the
	// server accepts by default.
	DefaultMaxBodyBytes = 4 << 20
)

// Config configures a Transport.
type Config struct {
	// Operations is the table of idempotent operations, the generated
	// package's ClientOperations().
	Operations []Operation
	// Base sends each attempt; nil is http.DefaultTransport.
	Base http.RoundTripper
	// BasePath is the path the API is served under ("/v1"), to be cut from
	// a request's path before it is matched against the table's templates.
	BasePath string
	// MaxAttempts bounds the requests of one call, the first included;
	// zero is DefaultMaxAttempts.
	MaxAttempts int
	// Budget is the longest a call keeps retrying, from its first attempt:
	// no attempt starts after it. It must be shorter than every
	// operation's TTL, or a late retry could reach a server that has
	// forgotten the key and run the operation again; an operation's
	// RetryBudget, when set, shortens it further. Zero is DefaultBudget,
	// shortened to half of an operation's TTL where that is shorter.
	Budget time.Duration
	// AttemptTimeout abandons an attempt whose answer has not arrived after
	// this long and retries it: its headers, and for an answer that may be
	// retried (a 409, a 503, …) the start of its body, which the Transport
	// reads to judge it. The body of an answer returned to the caller is
	// bounded by the call's context alone. Zero waits as long as the call's
	// context allows. WithAttemptTimeout overrides it per call.
	AttemptTimeout time.Duration
	// BackoffBase and BackoffMax shape the wait before a retry: a random
	// duration up to BackoffBase·2ⁿ (n counts the retries so far), never
	// above BackoffMax ("full jitter"). Zero is DefaultBackoffBase and
	// DefaultBackoffMax.
	BackoffBase, BackoffMax time.Duration
	// MaxBodyBytes bounds the request body kept in memory so that a retry
	// can send the same bytes again; zero is DefaultMaxBodyBytes. A larger
	// body is sent once, streamed on from what was read of it, never
	// retried: with a header or query key attached, while a body key stays
	// as the caller wrote it, and is reported when it is a top-level
	// member within the first MaxBodyBytes.
	MaxBodyBytes int64
	// OnCall, when set, receives each call's report as RoundTrip returns.
	OnCall func(*http.Request, Report)
}

// Transport is an http.RoundTripper that calls idempotent operations with a
// key and retries them safely (see the package documentation). It is safe
// for concurrent use.
type Transport struct {
	cfg    Config
	router *router
	// budget is each operation's retry budget, by operation ID.
	budget map[string]time.Duration
	// sleep waits for d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// draw draws a wait from [0, n) for backoff and its spread; tests
	// replace it.
	draw func(n time.Duration) time.Duration
}

// New checks cfg and returns its Transport. It refuses a table it cannot
// match requests against and a Budget that is not shorter than an
// operation's TTL.
func New(cfg Config) (*Transport, error) {
	if cfg.Base == nil {
		cfg.Base = http.DefaultTransport
	}
	if cfg.MaxAttempts < 0 || cfg.Budget < 0 || cfg.AttemptTimeout < 0 || cfg.BackoffBase < 0 || cfg.BackoffMax < 0 || cfg.MaxBodyBytes < 0 {
		return nil, errors.New("idemclient: attempts, budget, timeouts, backoff and body size must not be negative")
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	r, err := newRouter(cfg.BasePath, cfg.Operations)
	if err != nil {
		return nil, fmt.Errorf("idemclient: %w", err)
	}
	t := &Transport{cfg: cfg, router: r, budget: make(map[string]time.Duration), sleep: sleepCtx, draw: rand.N[time.Duration]}
	for _, rt := range r.routes {
		if rt.op.Unprotected {
			continue
		}
		b, err := budgetFor(cfg.Budget, rt.op)
		if err != nil {
			return nil, err
		}
		t.budget[rt.op.ID] = b
	}
	return t, nil
}

// budgetFor returns op's retry budget under the configured one.
func budgetFor(configured time.Duration, op Operation) (time.Duration, error) {
	b := configured
	if b == 0 {
		b = min(DefaultBudget, op.TTL/2)
	}
	if b >= op.TTL {
		return 0, fmt.Errorf("idemclient: retry budget %v is not shorter than the TTL %v of operation %s (%s %s): a retry after the TTL would run it again",
			b, op.TTL, op.ID, op.Method, op.Path)
	}
	if op.RetryBudget > 0 {
		b = min(b, op.RetryBudget)
	}
	return b, nil
}

// Client returns an http.Client that sends through t. It is also an
// oapi-codegen HTTPRequestDoer.
func (t *Transport) Client() *http.Client {
	return &http.Client{Transport: t}
}

// Lookup returns the operation of the table that req calls, or false.
func (t *Transport) Lookup(req *http.Request) (Operation, bool) {
	op := t.router.find(req)
	if op == nil {
		return Operation{}, false
	}
	return *op, true
}

// RoundTrip sends req, with a key and retries when it calls an operation of
// the table (see the package documentation). The response returned is the
// final attempt's; when the retries stop on a retryable answer, that answer
// is returned as it came (a 409 or 503 problem, for example) and the
// call's Report says GaveUp. A request redirected from an answer of the
// Transport's (a 307 or 308 the http.Client follows) continues that call:
// it carries the same key, and its Report counts the hops before it.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	prev := previousHop(req)
	op, want, unprotected := t.target(req, prev)
	sent := req
	if unprotected {
		// Its handler ignores keys: no effect key either, whose header
		// would let net/http's Transport send the request again.
		sent = req.WithContext(withoutEffectKey(ctx))
	}
	rep := Report{}
	res, err := t.call(sent.Context(), sent, op, want, &rep)
	if res != nil {
		rep.Status = res.StatusCode
		// Only an answer to a keyed request can come from the server's
		// record (and such an answer is final); on a keyless one the
		// header is noise (or a lie) that must not tell the caller its
		// operation already ran.
		rep.Replayed = rep.Key != "" && replayed(res)
	}
	h := &hop{method: req.Method, key: rep.Key}
	if rep.Key != "" {
		h.op = op
	}
	rep = prev.then(rep)
	if res != nil {
		h.rep = rep
		handOn(res, req, h)
	}
	if r := reportFrom(ctx); r != nil {
		*r = rep
	}
	if t.cfg.OnCall != nil {
		t.cfg.OnCall(req, rep)
	}
	return res, err
}

// target returns the operation req calls (nil for none) and the key it is
// to carry unless it carries its own: the key of the hop it was redirected
// from, else the one of its context (WithKey), else "" for a fresh one. A
// request to an Unprotected route, a redirect's hop included, calls no
// operation and carries no key, its effect key's header neither
// (unprotected): its handler ignores keys, so it is sent once, as it is.
func (t *Transport) target(req *http.Request, prev *hop) (op *Operation, want string, unprotected bool) {
	op = t.router.match(req)
	if op != nil && op.Unprotected {
		return nil, "", true
	}
	cop, key := prev.carries(req)
	if key == "" {
		if k := effectKeyFrom(req.Context()); k != "" {
			return op, k, false
		}
		return op, keyFrom(req.Context()), false
	}
	if op == nil {
		op = cop
	}
	return op, key, false
}

// call makes the call of req to op (nil for none), with want as the key
// when the request carries none of its own, and fills rep.
func (t *Transport) call(ctx context.Context, req *http.Request, op *Operation, want string, rep *Report) (*http.Response, error) {
	if op == nil && !idempotentMethod(req.Method) {
		// Sent once, as it came (with its effect key): its body need not
		// be kept for a retry.
		rep.Attempts = 1
		return t.cfg.Base.RoundTrip(withEffectHeader(req))
	}
	body, whole, err := readBody(ctx, req, t.cfg.MaxBodyBytes)
	if err != nil {
		return nil, err
	}
	if !whole {
		return t.sendOnce(ctx, req, op, want, body, rep)
	}
	// Every attempt is a clone of this one, so the caller's request is
	// never changed (RoundTrip must not) and the key and body set here are
	// the same on every attempt.
	proto := req.Clone(ctx)
	if op == nil {
		setEffectHeader(proto)
	}
	retryable := idempotentMethod(req.Method)
	budget := time.Duration(0)
	if op != nil {
		rep.Operation = op.ID
		k, b, ok, err := attachKey(proto, body, op, want)
		if err != nil {
			return nil, err
		}
		body = b
		if ok {
			rep.Key = k
			retryable = true
			budget = t.budget[op.ID]
		}
	}
	if !retryable {
		rep.Attempts = 1
		res, err := t.cfg.Base.RoundTrip(withBody(ctx, proto, body))
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	if budget == 0 {
		// A method idempotent by HTTP has no TTL to keep within.
		budget = t.cfg.Budget
		if budget == 0 {
			budget = DefaultBudget
		}
	}
	deadline := time.Now().Add(budget)
	timeout := attemptTimeoutFrom(ctx, t.cfg.AttemptTimeout)
	for attempt := 1; ; attempt++ {
		rep.Attempts = attempt
		o := t.exchange(ctx, proto, body, rep.Key != "", timeout, attempt)
		if ctx.Err() != nil {
			// The caller gave up; its context's error says why.
			if o.res != nil {
				_ = o.res.Body.Close()
			}
			return nil, ctx.Err()
		}
		if !o.again {
			return o.res, o.err
		}
		if attempt >= t.cfg.MaxAttempts || o.least > time.Until(deadline) {
			// Out of attempts or of budget: the last outcome stands.
			rep.GaveUp = true
			return o.res, o.err
		}
		if o.res != nil {
			// exchange has read its start; the rest is not worth waiting for.
			_ = o.res.Body.Close()
		}
		// The spread added to a Retry-After never costs the retry the
		// budget allows.
		if err := t.sleep(ctx, min(o.wait, time.Until(deadline))); err != nil {
			return nil, err
		}
	}
}

// outcome is one attempt's answer and what the call does next.
type outcome struct {
	res   *http.Response
	err   error
	again bool          // the answer calls for a retry
	wait  time.Duration // how long to wait before it
	least time.Duration // the shortest wait the server allows
}

// exchange sends one attempt and judges its answer. The attempt's timeout
// runs until the Transport has read what it reads of the answer (the start
// of an answer it may retry, where a 409 names its problem type), so a
// server that sends its headers and then stalls is abandoned like one that
// never answers. The body of an answer the caller gets is bounded by the
// call's context alone.
func (t *Transport) exchange(ctx context.Context, proto *http.Request, body []byte, keyed bool, timeout time.Duration, n int) outcome {
	actx, cancel := ctx, context.CancelCauseFunc(func(error) {})
	var timer *time.Timer
	if timeout > 0 {
		actx, cancel = context.WithCancelCause(ctx)
		timer = time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
	}
	res, err := t.cfg.Base.RoundTrip(withBody(actx, proto, body))
	var head []byte
	if err == nil && mayRetry(res, keyed) {
		head = peek(res)
	}
	if timer != nil && !timer.Stop() {
		// The timer fired: whatever came back is cut off, or about to be.
		if res != nil {
			_ = res.Body.Close()
		}
		res, err = nil, fmt.Errorf("idemclient: %w after %v", errAttemptTimeout, timeout)
	}
	o := outcome{res: res, err: err}
	o.again, o.wait, o.least = t.verdict(res, head, err, keyed, n)
	switch {
	case res == nil:
		cancel(nil)
	case timer != nil:
		res.Body = &cancelBody{ReadCloser: res.Body, cancel: func() { cancel(nil) }}
	}
	return o
}

// errAttemptTimeout ends an attempt that took longer than its timeout.
var errAttemptTimeout = errors.New("attempt timed out")

// cancelBody ends an attempt's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// idempotentMethod reports whether m is idempotent by definition (RFC 9110
// §9.2.2), so that a request without a policy may be sent again.
func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
