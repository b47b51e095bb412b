package idem

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/key"
)

// Config configures an Engine.
type Config struct {
	// Store keeps the keys. It must be a Transactor when any policy is
	// transactional.
	Store Store
	// Policies are the protected operations; the generated NewEngine fills
	// them in.
	Policies []Policy
	// Tenant returns the tenant of an authenticated request. It runs after
	// authentication; a request whose tenant it cannot resolve is refused
	// with a 500 and its handler never runs.
	Tenant func(*http.Request) (string, bool)
	// Observer, when set, sees the outcome of every protected request.
	Observer Observer
	// Logger receives the engine's own logs; keys are logged as a short
	// hash unless LogKeys is set. Nil discards them.
	Logger  *slog.Logger
	LogKeys bool
	// ProblemBase prefixes every problem type name. The default is
	// "https://idemgen.dev/problems/".
	ProblemBase string
	// MaxRequestBytes bounds the request body of a protected operation,
	// which is read whole before the claim. The default is 1 MiB.
	MaxRequestBytes int64
	// BasePath is stripped from request paths before they are matched
	// against path templates, for APIs served below a prefix such as "/v1".
	BasePath string
}

// Engine enforces the policies of one API. It is safe for concurrent use.
type Engine struct {
	store       Store
	tx          Transactor // nil when the store has no transactions
	tenant      func(*http.Request) (string, bool)
	observer    Observer
	log         *slog.Logger
	logKeys     bool
	problemBase string
	maxBody     int64
	ops         map[string]*operation
	router      router
}

// operation is a policy prepared for serving.
type operation struct {
	Policy
	template    template
	fingerprint *fingerprint.Compiled
	replay      map[string]bool // canonical names of headers kept for replay
}

// defaultReplayHeaders are kept for every operation (SEMANTICS §3.5).
var defaultReplayHeaders = []string{"Content-Type", "Content-Language", "Content-Location", "Location"}

// neverStored are headers that a replay must never carry, whatever a
// policy lists: they belong to one response or one client.
var neverStored = map[string]bool{
	"Set-Cookie": true, "Date": true, "Content-Length": true, "Transfer-Encoding": true,
	"Connection": true, "Retry-After": true, headerIdempotentReplayed: true,
}

// New prepares an engine. It refuses a configuration that could leave a
// handler unprotected: a missing store or tenant function, a transactional
// policy on a store without transactions, an invalid policy.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("idem: Config.Store is nil")
	}
	if cfg.Tenant == nil {
		return nil, errors.New("idem: Config.Tenant is nil; the engine needs the authenticated tenant")
	}
	e := &Engine{
		store:       cfg.Store,
		tenant:      cfg.Tenant,
		observer:    cfg.Observer,
		log:         cfg.Logger,
		logKeys:     cfg.LogKeys,
		problemBase: cfg.ProblemBase,
		maxBody:     cfg.MaxRequestBytes,
		ops:         make(map[string]*operation, len(cfg.Policies)),
		router:      router{basePath: cfg.BasePath, byMethod: make(map[string][]*operation)},
	}
	e.tx, _ = cfg.Store.(Transactor)
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.problemBase == "" {
		e.problemBase = defaultProblemBase
	}
	if e.maxBody <= 0 {
		e.maxBody = 1 << 20
	}
	for _, p := range cfg.Policies {
		op, err := e.prepare(p)
		if err != nil {
			return nil, fmt.Errorf("idem: operation %s %s (%s): %w", p.Method, p.Path, p.OperationID, err)
		}
		if _, dup := e.ops[p.OperationID]; dup {
			return nil, fmt.Errorf("idem: operation ID %q appears twice", p.OperationID)
		}
		e.ops[p.OperationID] = op
		e.router.byMethod[p.Method] = append(e.router.byMethod[p.Method], op)
	}
	for _, ops := range e.router.byMethod {
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].template.literals > ops[j].template.literals })
	}
	return e, nil
}

func (e *Engine) prepare(p Policy) (*operation, error) {
	switch {
	case p.Method != http.MethodPost && p.Method != http.MethodPatch:
		return nil, fmt.Errorf("method %s cannot carry a policy; only POST and PATCH", p.Method)
	case p.Scope != ScopeOperation && p.Scope != ScopeTenant:
		return nil, fmt.Errorf("unknown scope %q", p.Scope)
	case p.KeyMaxLength < 1 || p.KeyMaxLength > 255:
		return nil, fmt.Errorf("KeyMaxLength %d is outside 1..255", p.KeyMaxLength)
	case p.Lease <= 0 || p.TTL <= p.Lease:
		return nil, fmt.Errorf("lease %s must be positive and shorter than ttl %s", p.Lease, p.TTL)
	case p.MaxSnapshotBytes < 0:
		return nil, fmt.Errorf("MaxSnapshotBytes %d is negative", p.MaxSnapshotBytes)
	case p.OnLeaseExpiry != Takeover && p.OnLeaseExpiry != FailClosed:
		return nil, fmt.Errorf("unknown OnLeaseExpiry %q", p.OnLeaseExpiry)
	case p.Key.Name == "":
		return nil, errors.New("the key source has no name")
	case p.Key.In != KeyInHeader && p.Key.In != KeyInBody && p.Key.In != KeyInQuery:
		return nil, fmt.Errorf("unknown key location %q", p.Key.In)
	case p.Transactional && e.tx == nil:
		return nil, fmt.Errorf("the policy is transactional but the store %T has no transactions", e.store)
	}
	if p.Key.In == KeyInBody {
		if err := fingerprint.CheckPointer(p.Key.Name); err != nil {
			return nil, fmt.Errorf("the body key: %w", err)
		}
	}
	t, err := parseTemplate(p.Path)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprint.Compile(p.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	op := &operation{Policy: p, template: t, fingerprint: fp, replay: make(map[string]bool)}
	for _, h := range append(append([]string(nil), defaultReplayHeaders...), p.ReplayHeaders...) {
		name := http.CanonicalHeaderKey(h)
		if neverStored[name] {
			return nil, fmt.Errorf("header %s can never be replayed", name)
		}
		op.replay[name] = true
	}
	return op, nil
}

// Middleware protects every request whose method and path match a policy's
// operation and passes every other request through untouched. It has the
// shape of net/http middleware, so it mounts on http.ServeMux, chi and
// oapi-codegen's Middlewares alike.
func (e *Engine) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op, params := e.router.find(r.Method, r.URL.EscapedPath())
		if op == nil {
			next.ServeHTTP(w, r)
			return
		}
		e.serve(w, r, op, params, next)
	})
}

// Handler protects next, the handler of one operation, for routers that
// mount per route. It panics when operationID has no policy: that is a
// wiring mistake to surface at start-up, not a request to serve.
func (e *Engine) Handler(operationID string, next http.Handler) http.Handler {
	op, ok := e.ops[operationID]
	if !ok {
		panic(fmt.Sprintf("idem: no policy for operation %q", operationID))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != op.Method {
			next.ServeHTTP(w, r)
			return
		}
		p, _ := strings.CutPrefix(r.URL.EscapedPath(), e.router.basePath)
		params, _ := op.template.match(strings.Split(strings.TrimPrefix(p, "/"), "/"))
		e.serve(w, r, op, params, next)
	})
}

// request is one protected request on its way through the engine.
type request struct {
	op     *operation
	start  time.Time
	tenant string
	key    string // logged through keyLabel only
	event  Event
}

func (e *Engine) serve(w http.ResponseWriter, r *http.Request, op *operation, params map[string]string, next http.Handler) {
	q := &request{op: op, start: time.Now()}
	q.event.Operation = op.OperationID
	defer func() {
		q.event.Duration = time.Since(q.start)
		if e.observer != nil {
			e.observer.Observe(r.Context(), q.event)
		}
	}()

	tenant, ok := e.tenant(r)
	if !ok || tenant == "" {
		e.reject(w, q, e.problem(ProblemTenantUnresolved, http.StatusInternalServerError,
			"Tenant not resolved", "The server could not tell which tenant this request belongs to, so it did not run it. Contact support."))
		return
	}
	q.tenant, q.event.Tenant = tenant, tenant

	// A header or query key is looked at before the body is read, so that
	// a keyless request on an operation whose key is optional passes
	// through untouched, its body streamed to the handler.
	var k string
	if op.Key.In != KeyInBody {
		key, present, err := e.key(r, op)
		if err != nil {
			e.reject(w, q, e.keyProblem(op, err))
			return
		}
		if !present {
			e.noKey(w, r, q, next)
			return
		}
		k = key
	}

	body, p, ok := e.readBody(r)
	if !ok {
		e.reject(w, q, p)
		return
	}
	mediaType := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mediaType, _, _ = mime.ParseMediaType(ct)
	}
	// The body is read as the media type the operation declares; a body
	// of another kind is refused before the key is even looked for in it.
	mediaType, err := op.fingerprint.BodyMediaType(mediaType, len(body) > 0)
	if err != nil {
		e.reject(w, q, e.bodyProblem(op, err))
		return
	}

	in := fingerprint.Input{MediaType: mediaType, Body: body, Path: params}
	if len(op.Fingerprint.Query) > 0 {
		// Parsing the query string costs allocations; only policies that
		// fingerprint query parameters pay for it.
		in.Query = r.URL.Query()
	}
	var sum [32]byte
	if op.Key.In == KeyInBody {
		// One parse of the body yields both the key and the fingerprint.
		// A body that cannot be read is at fault before any key in it.
		var (
			v     []byte
			found bool
		)
		sum, v, found, err = op.fingerprint.SumLookup(in, op.Key.Name)
		if err != nil {
			e.reject(w, q, e.bodyProblem(op, err))
			return
		}
		key, present, err := key.FromBodyValue(v, found, op.Key.Name, op.KeyMaxLength)
		switch {
		case err != nil:
			e.reject(w, q, e.keyProblem(op, err))
			return
		case !present:
			e.noKey(w, r, q, next)
			return
		}
		k = key
	} else if sum, err = op.fingerprint.Sum(in); err != nil {
		e.reject(w, q, e.bodyProblem(op, err))
		return
	}
	q.key = k

	claim := Claim{
		Identity:      Identity{Tenant: tenant, Scope: scopeOf(op.Policy), Key: k},
		Operation:     op.OperationID,
		Fingerprint:   sum[:],
		Token:         rand.Text(),
		Lease:         op.Lease,
		TTL:           op.TTL,
		OnLeaseExpiry: op.OnLeaseExpiry,
	}
	if op.Transactional {
		e.serveTx(w, r, q, claim, next)
		return
	}
	e.serveClaim(w, r, q, claim, next)
}

// noKey answers a request without a key: a 400 when the policy requires
// one, otherwise the handler runs with no idempotency.
func (e *Engine) noKey(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if q.op.Required {
		e.reject(w, q, e.problem(ProblemMissingKey, http.StatusBadRequest, "Idempotency key required",
			"This operation requires an idempotency key in "+keyPlace(q.op.Key)+". Send a unique key per logical request and reuse it on retries."))
		return
	}
	q.event.Outcome = OutcomeNoKey
	e.runUnprotected(w, r, q, next)
}

// keyProblem answers a key that breaks the rules of SEMANTICS §2.
func (e *Engine) keyProblem(op *operation, err error) Problem {
	return e.problem(ProblemInvalidKey, http.StatusBadRequest, "Invalid idempotency key",
		err.Error()+". Send a key of 1 to "+strconv.Itoa(op.KeyMaxLength)+" visible ASCII characters.")
}

// bodyProblem answers a body the engine cannot read: 415 for a media type
// it cannot fingerprint, 400 for a malformed body. Neither claims the key.
func (e *Engine) bodyProblem(op *operation, err error) Problem {
	if errors.Is(err, fingerprint.ErrMediaType) {
		takes := "application/json or application/x-www-form-urlencoded"
		if op.Fingerprint.MediaType != "" {
			takes = op.Fingerprint.MediaType
		}
		return e.problem(ProblemUnsupportedMediaType, http.StatusUnsupportedMediaType, "Unsupported media type",
			"This operation takes a body of type "+takes+"; send it with that Content-Type. The idempotency key was not used.")
	}
	why := strings.TrimPrefix(err.Error(), fingerprint.ErrBody.Error()+": ")
	return e.problem(ProblemInvalidBody, http.StatusBadRequest, "Request body could not be read",
		"The request body is not well-formed ("+why+"). Fix it and retry; the idempotency key was not used.")
}

func scopeOf(p Policy) string {
	if p.Scope == ScopeTenant {
		return ""
	}
	return p.OperationID
}

func keyPlace(k KeySource) string {
	switch k.In {
	case KeyInBody:
		return "the body field " + k.Name
	case KeyInQuery:
		return "the query parameter " + k.Name
	default:
		return "the " + k.Name + " header"
	}
}

// readBody reads the body once, within the limit, and hands the handler an
// intact copy.
func (e *Engine) readBody(r *http.Request) ([]byte, Problem, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, Problem{}, true
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, e.maxBody+1))
	_ = r.Body.Close()
	if err != nil {
		return nil, e.problem(ProblemInvalidBody, http.StatusBadRequest, "Request body could not be read",
			"The request body could not be read completely. Retry with the same idempotency key."), false
	}
	if int64(len(body)) > e.maxBody {
		return nil, e.problem(ProblemBodyTooLarge, http.StatusRequestEntityTooLarge, "Request body too large",
			"The request body is larger than "+strconv.FormatInt(e.maxBody, 10)+" bytes."), false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return body, Problem{}, true
}

// key reads a header or query key; a body key comes with the fingerprint.
func (e *Engine) key(r *http.Request, op *operation) (string, bool, error) {
	switch op.Key.In {
	case KeyInQuery:
		return key.FromQuery(r.URL.Query(), op.Key.Name, op.KeyMaxLength)
	default:
		return key.FromHeader(r.Header, op.Key.Name, op.KeyMaxLength)
	}
}

// keyLabel is how a key appears in logs: a short hash unless the operator
// asked for the keys themselves. Keys can carry customer identifiers.
func (e *Engine) keyLabel(k string) string {
	if e.logKeys {
		return k
	}
	s := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(s[:6])
}

func (e *Engine) reject(w http.ResponseWriter, q *request, p Problem) {
	q.event.Outcome, q.event.Status = OutcomeRejected, p.Status
	p.Write(w)
}

// serveClaim runs a non-transactional request: claim, handler, complete.
func (e *Engine) serveClaim(w http.ResponseWriter, r *http.Request, q *request, c Claim, next http.Handler) {
	res, err := e.timed(q, func() (Result, error) { return e.store.Claim(r.Context(), c) })
	if err != nil {
		e.storeUnavailable(w, q, "claim", err)
		return
	}
	if !res.Won {
		e.answerExisting(w, q, c, res.Existing)
		return
	}
	e.run(w, r, q, plainHold{e.store, c}, res, next)
}

// serveTx runs a transactional request: the claim, the handler's writes and
// the completion share one database transaction (SEMANTICS §5).
func (e *Engine) serveTx(w http.ResponseWriter, r *http.Request, q *request, c Claim, next http.Handler) {
	var tx Tx
	res, err := e.timed(q, func() (Result, error) {
		res, t, err := e.tx.ClaimTx(r.Context(), c)
		tx = t
		return res, err
	})
	if err != nil {
		e.storeUnavailable(w, q, "claim", err)
		return
	}
	if !res.Won {
		e.answerExisting(w, q, c, res.Existing)
		return
	}
	e.run(w, r, q, txHold{tx}, res, next)
}

// hold is a won claim; how it ends differs between a plain claim and one
// held inside a transaction.
type hold interface {
	// abandon ends the claim after the handler panicked.
	abandon(ctx context.Context) error
	// release lets a retry run the handler again.
	release(ctx context.Context) error
	// complete stores the response; ErrFenced when the claim was taken over.
	complete(ctx context.Context, resp Response) error
	// tx is the transaction handed to the handler, or nil.
	tx() Tx
}

// plainHold is a claim row committed on its own: the handler's effects are
// outside the store's reach.
type plainHold struct {
	store Store
	c     Claim
}

func (h plainHold) abandon(ctx context.Context) error {
	return h.store.Abandon(ctx, h.c.Identity, h.c.Token, h.c.OnLeaseExpiry)
}
func (h plainHold) release(ctx context.Context) error {
	return h.store.Release(ctx, h.c.Identity, h.c.Token)
}
func (h plainHold) complete(ctx context.Context, resp Response) error {
	return h.store.Complete(ctx, h.c.Identity, h.c.Token, resp)
}
func (h plainHold) tx() Tx { return nil }

// txHold is a claim inside the handler's transaction: a panic or an
// unstored status rolls the handler's writes back with the claim.
type txHold struct{ t Tx }

func (h txHold) abandon(ctx context.Context) error { return h.t.Release(ctx) }
func (h txHold) release(ctx context.Context) error { return h.t.Release(ctx) }
func (h txHold) complete(ctx context.Context, resp Response) error {
	return h.t.Commit(ctx, resp)
}
func (h txHold) tx() Tx { return h.t }

// run runs the handler under a won claim and ends the claim by the
// response's class. The response is held back until it is stored, so a
// client never sees an answer that its retry would not see too; only a
// non-transactional body that outgrows the snapshot limit streams on.
func (e *Engine) run(w http.ResponseWriter, r *http.Request, q *request, h hold, res Result, next http.Handler) {
	// The claim must end even when the client has gone away.
	ctx := context.WithoutCancel(r.Context())
	limit := q.op.MaxSnapshotBytes
	if tx := h.tx(); tx != nil {
		// Not a byte may leave before the commit.
		limit = -1
		r = r.WithContext(context.WithValue(r.Context(), txKey{}, tx.Driver()))
	}
	rec := newRecorder(w, limit)
	if panicked := e.runHandler(rec, r, next); panicked != nil {
		err := e.storeErr(q, func() error { return h.abandon(ctx) })
		e.handlerPanicked(w, q, rec, panicked, err)
		return
	}
	status := rec.statusCode()
	q.event.Status = status
	if !e.storable(q.op, status) {
		if err := e.storeErr(q, func() error { return h.release(ctx) }); err != nil {
			e.log.WarnContext(ctx, "idempotency claim not released; it stays until its lease ends",
				"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
		}
		e.outcome(q, OutcomeReleased)
		rec.send()
		return
	}
	resp := e.snapshot(q.op, rec)
	err := e.storeErr(q, func() error { return h.complete(ctx, resp) })
	switch {
	case errors.Is(err, ErrFenced):
		e.fenced(w, q, rec, err)
	case err != nil && h.tx() != nil:
		// The commit failed, so the handler's writes are gone with it:
		// sending its answer would acknowledge what does not exist.
		e.storeUnavailable(w, q, "commit", err)
	case err != nil:
		// The handler's effects happened; its answer is the truth. The claim
		// stays in flight and is judged under onLeaseExpiry after its lease.
		e.log.ErrorContext(ctx, "idempotency completion failed; the key stays in flight until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
		q.event.Outcome, q.event.Err = OutcomeStoreError, err
		rec.send()
	default:
		e.outcome(q, executedOutcome(res))
		rec.send()
	}
}

// outcome records o unless the request already has one (a keyless run is
// OutcomeNoKey whatever its status).
func (e *Engine) outcome(q *request, o Outcome) {
	if q.event.Outcome == "" {
		q.event.Outcome = o
	}
}

func executedOutcome(res Result) Outcome {
	if res.TookOver {
		return OutcomeTakeover
	}
	return OutcomeExecuted
}

// runUnprotected runs a request that carries no key on an operation whose
// key is optional. A transactional handler still gets its transaction.
func (e *Engine) runUnprotected(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if !q.op.Transactional {
		q.event.Status = e.runCounting(w, r, next)
		return
	}
	tx, err := e.tx.Begin(r.Context())
	if err != nil {
		e.storeUnavailable(w, q, "begin", err)
		return
	}
	e.run(w, r, q, txHold{tx}, Result{Won: true}, next)
}

// runHandler runs next and reports a panic instead of letting it unwind
// through the engine, so that the claim can be abandoned. http.ErrAbortHandler
// is re-raised after the claim is dealt with, as net/http expects.
func (e *Engine) runHandler(w http.ResponseWriter, r *http.Request, next http.Handler) (panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	next.ServeHTTP(w, r)
	return nil
}

func (e *Engine) handlerPanicked(w http.ResponseWriter, q *request, rec *recorder, v any, storeErr error) {
	q.event.Outcome, q.event.Err = OutcomePanicked, fmt.Errorf("handler panicked: %v", v)
	e.log.Error("handler panicked; its idempotency claim was abandoned",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "panic", v, "store_err", storeErr)
	if v == http.ErrAbortHandler {
		panic(v)
	}
	q.event.Status = http.StatusInternalServerError
	if rec.streaming {
		// Part of the answer is on the wire; the connection cannot carry
		// a clean error any more.
		panic(http.ErrAbortHandler)
	}
	e.problem(ProblemHandlerFailed, http.StatusInternalServerError, "Request failed",
		"The request failed inside the server. Retry with the same idempotency key; if the answer is an outcome-unknown problem, contact support.").Write(w)
}

// storable reports whether a response of this status is stored and replayed
// (SEMANTICS §3.4): statuses that describe a passing condition are not, so
// that a retry runs the handler again.
func (e *Engine) storable(op *operation, status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooEarly,
		http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return false
	}
	if status >= 500 {
		// 500 and the server errors the contract does not name (501, 505,
		// 507, …) say the server failed; they are kept only on request.
		return op.CacheServerErrors
	}
	return true
}

// snapshot builds what is stored: the status, the headers the policy keeps
// and the body, or no body when it outgrew the policy's limit.
func (e *Engine) snapshot(op *operation, rec *recorder) Response {
	resp := Response{Status: rec.statusCode(), Header: make(http.Header)}
	for name, v := range rec.header {
		if op.replay[name] {
			resp.Header[name] = append([]string(nil), v...)
		}
	}
	if rec.overflowed || int64(rec.body.Len()) > op.MaxSnapshotBytes {
		resp.Omitted = true
		return resp
	}
	resp.Body = rec.body.Bytes()
	return resp
}

// answerExisting answers a request that lost its claim (SEMANTICS §3.5).
func (e *Engine) answerExisting(w http.ResponseWriter, q *request, c Claim, rec Record) {
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) || rec.Operation != c.Operation {
		detail := "This idempotency key was already used for a different request. Use a new key for a new request."
		if rec.Operation != c.Operation {
			detail = "This idempotency key was already used for another operation. Use a new key for a new request."
		}
		q.event.Outcome = OutcomeMismatch
		e.send(w, q, e.problem(ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency key reused", detail))
		return
	}
	switch rec.State {
	case StateCompleted:
		if rec.Response == nil || rec.Response.Omitted {
			status := 0
			if rec.Response != nil {
				status = rec.Response.Status
			}
			q.event.Outcome = OutcomeNotReplayable
			e.send(w, q, e.problem(ProblemNotReplayable, http.StatusConflict, "Response not replayable",
				"The request with this key completed with status "+strconv.Itoa(status)+
					", but its response was too large to keep. Look the result up with a read request."))
			return
		}
		e.replay(w, q, rec.Response)
	case StateInFlight:
		q.event.Outcome = OutcomeInFlight
		p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
			"A request with this idempotency key is still being processed. Retry after the Retry-After delay with the same key.")
		p.RetryAfter = retryAfter(rec.LeaseRemaining)
		e.send(w, q, p)
	default:
		q.event.Outcome = OutcomeIndeterminate
		e.send(w, q, e.problem(ProblemOutcomeUnknown, http.StatusConflict, "Outcome unknown",
			"A request with this idempotency key was interrupted and its outcome is unknown. Do not retry; contact support to resolve it."))
	}
}

// retryAfter is the hint sent with a 409 in progress: whole seconds, at
// least 1, at most what is left of the lease, and short (2 s at most), since
// most handlers finish well within their lease.
func retryAfter(remaining time.Duration) int {
	s := int(math.Ceil(remaining.Seconds()))
	return max(1, min(s, 2))
}

func (e *Engine) replay(w http.ResponseWriter, q *request, resp *Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set(headerIdempotentReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
	q.event.Outcome, q.event.Status = OutcomeReplayed, resp.Status
}

func (e *Engine) send(w http.ResponseWriter, q *request, p Problem) {
	q.event.Status = p.Status
	p.Write(w)
}

func (e *Engine) fenced(w http.ResponseWriter, q *request, rec *recorder, err error) {
	q.event.Outcome, q.event.Err = OutcomeFenced, err
	e.log.Warn("idempotency claim was taken over while the handler ran; its response is discarded",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key))
	if rec.streaming {
		q.event.Status = rec.statusCode()
		return
	}
	p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
		"Another attempt with this idempotency key took over. Retry with the same key to get its result.")
	p.RetryAfter = 1
	e.send(w, q, p)
}

func (e *Engine) storeUnavailable(w http.ResponseWriter, q *request, step string, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.Error("idempotency store failed; the handler was not run or its writes were rolled back",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "step", step, "err", err)
	p := e.problem(ProblemStoreUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The server could not record the idempotency key, so it did not process the request. Retry later with the same key.")
	p.RetryAfter = storeUnavailableRetryAfter
	e.send(w, q, p)
}

func (e *Engine) timed(q *request, f func() (Result, error)) (Result, error) {
	t := time.Now()
	res, err := f()
	q.event.StoreDuration += time.Since(t)
	return res, err
}

func (e *Engine) storeErr(q *request, f func() error) error {
	t := time.Now()
	err := f()
	q.event.StoreDuration += time.Since(t)
	return err
}

// runCounting runs next and reports the status it sent.
func (e *Engine) runCounting(w http.ResponseWriter, r *http.Request, next http.Handler) int {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == 0 {
		return http.StatusOK
	}
	return sw.status
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// txKey carries the store's transaction to a transactional handler.
type txKey struct{}

// TxFrom returns the transaction of a transactional operation's request,
// as the store's driver type (pgx.Tx, *sql.Tx).
func TxFrom[Tx any](ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok
}

// TxHandler adapts a handler that writes inside the idempotency transaction.
// Generated code calls it for every transactional operation. A request that
// reaches it without a transaction of type Tx (the engine is not mounted in
// front of it, or the store's driver type differs) is refused with a 500:
// the handler never runs unprotected.
func TxHandler[Tx any](operationID string, h func(w http.ResponseWriter, r *http.Request, tx Tx)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := TxFrom[Tx](r.Context())
		if !ok {
			Problem{
				Type:   defaultProblemBase + ProblemTransactionMissing,
				Title:  "Transaction unavailable",
				Status: http.StatusInternalServerError,
				Detail: "The server is misconfigured: operation " + operationID + " must run behind the idempotency engine with a transactional store. Contact support.",
			}.Write(w)
			return
		}
		h(w, r, tx)
	})
}
