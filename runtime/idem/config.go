package idem

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/movingmean"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Config configures an Engine.
type Config struct {
	// Store keeps the keys. It must be a Transactor when any policy is
	// transactional.
	Store idemstore.Store
	// Policies are the protected operations; the generated NewEngine fills
	// them in.
	Policies []Policy
	// Tenant returns the tenant of an authenticated request. It runs after
	// authentication; a request whose tenant it cannot resolve is refused
	// with a 500 and its handler never runs. A service without tenants
	// sets SingleTenant.
	Tenant func(*http.Request) (string, bool)
	// Observer, when set, sees the outcome of every protected request.
	Observer Observer
	// Logger receives the engine's own logs; keys are logged by their
	// label (KeyLabel) unless LogKeys is set. Nil logs through
	// slog.Default(); a logger over slog.DiscardHandler silences them.
	// docs/runtime.md lists every WARN and ERROR with what to do about it.
	Logger  *slog.Logger
	LogKeys bool
	// KeyLabelSecret keys the labels under which keys appear in logs and
	// observer events (KeyLabel). Give every replica of a deployment the
	// same secret, kept like any other credential, and give it to
	// `idemgen keys` to find the row a log line names. It needs at least 16
	// random bytes, as each of Secrets does. When it is empty the
	// engine draws a random secret: labels then match only within one
	// process's lifetime.
	KeyLabelSecret []byte
	// ProblemBase prefixes every problem type name. The default is
	// problem.DefaultBase.
	ProblemBase string
	// MaxRequestBytes bounds the request body of a protected operation,
	// which is read whole before the claim. The default is 1 MiB.
	MaxRequestBytes int64
	// StoreTimeout bounds each store call that changes a key (claim,
	// completion, release, commit). These calls do not end when the
	// client hangs up; past the bound the call fails and the key's fate
	// follows docs/semantics.md §3.6. The default is 10 s.
	StoreTimeout time.Duration
	// BasePath is stripped from request paths before they are matched
	// against path templates, for APIs served below a prefix such as "/v1".
	BasePath string
	// Unprotected are the routes of the same router that have no policy
	// but share paths with a protected template and are more specific
	// than it, such as POST /pay/batch beside a protected POST /pay/{id}:
	// the router sends /pay/batch to its own handler (ServeMux and chi
	// prefer the more specific route), so Middleware passes such a
	// request through rather than apply /pay/{id}'s policy to it. The
	// generated NewEngine adds the spec's. A route that matches the same
	// requests as a protected one with neither more specific is refused.
	Unprotected []Route
	// Secrets keep customers' data out of the store. With a secret, a key
	// is stored as its HMAC-SHA256 ("hmac " and 64 hex digits) and the
	// fingerprint as an HMAC of the request's canonical SHA-256, so that a
	// reader of the database can neither read a key nor test guesses of a
	// fingerprinted field (an amount) against a row. Give every replica the
	// same secrets (at least 16 random bytes each), kept like any other
	// credential, and give them to `idemgen keys`.
	//
	// The list is newest first: new rows are written under Secrets[0];
	// rows written under the others are still found, at extra round trips
	// (docs/runtime.md), until SecretsRotatedAt + ttl + lease has passed.
	// An empty entry after the first stands for rows written before
	// secrets were configured. Effect keys and recorded phases are not
	// derived under this list but under EffectSecret, which a rotation
	// never touches. Secrets[0] also keys the log labels, so
	// KeyLabelSecret must then be empty or equal to it, and LogKeys unset.
	// Without secrets, keys and fingerprints are stored as they are.
	Secrets [][]byte
	// SecretsRotatedAt is when the last replica began writing under
	// Secrets[0]. Past it by an operation's ttl + lease, no row of that
	// operation can be under an older secret, and the engine stops looking
	// for one. Zero: the older secrets are always consulted. Once set, it
	// says the list was rotated, and EffectSecret must be set too.
	SecretsRotatedAt time.Time
	// EffectSecret derives effect keys (EffectKey) and names the phases a
	// request records (Phase), so that every run of a request, in any
	// replica, before and after any step of a rotation of Secrets, sends a
	// downstream the same key and finds the same phases
	// (docs/semantics.md §8.1). Rotating Secrets never touches it: set it
	// once, give every replica the same one (at least 16 random bytes,
	// kept like any other credential) and keep it when the store secret
	// of the same value is retired from Secrets. Changing it changes every
	// effect key: a request retried across the change calls its
	// downstreams again under another key.
	//
	// Unset, it is Secrets[0] when Secrets holds one entry and nothing
	// rotated (SecretsRotatedAt zero), and effect keys are unkeyed hashes
	// when there are no Secrets: what earlier releases derived. New
	// refuses to leave it unset beside a longer list or a set
	// SecretsRotatedAt, which is a rotation under way or done: set it to
	// the secret effect keys were derived under before (the one listed
	// alone before the rotation; earlier releases took the list's last
	// entry), or set UnkeyedEffectKeys when that was none.
	EffectSecret []byte
	// UnkeyedEffectKeys derives effect keys and phases' names with no
	// secret, as a deployment without Secrets does, whatever Secrets
	// lists: a deployment that made effect keys before it turned secrets
	// on sets it from the first deploy that lists a secret, and keeps it,
	// so that turning secrets on changes no effect key. EffectSecret must
	// then be unset. An unkeyed effect key shows none of its parts, but a
	// downstream that knows a tenant and scope could test guesses of a
	// short client key against it.
	UnkeyedEffectKeys bool
	// RetryAfterJitter draws the jitter added to a 409
	// request-in-progress's Retry-After, from [0, n); nil draws from a
	// generator of the engine's own. Tests fix it.
	RetryAfterJitter func(n int) int
	// DuplicateWait lets a request that meets its key in flight wait, at
	// most this long from its arrival, for the first request's answer and
	// then replay it (docs/semantics.md §3.5), instead of being answered
	// 409 request-in-progress at once; past the bound the 409 stands.
	// While it waits it holds its client's connection and a goroutine,
	// never a store connection: a first request served by this process
	// wakes it when it ends, and one served elsewhere is looked for again
	// every quarter of the operation's handler time (at least 10 ms, at
	// most 250 ms). Zero answers 409 at once.
	DuplicateWait time.Duration
	// DuplicateWaiters bounds the requests of one key that wait at once
	// (DuplicateWait) in this process; the ones past it are answered 409
	// at once, so that a client's copies of one request hold no more
	// than this many of the slots in front of the engine while they
	// wait. Zero is 1.
	DuplicateWaiters int
	// Sealer, when set, seals every stored response's headers and body
	// (SealResponse) before it reaches the store, and opens them when a
	// retry replays them. NewAESGCM is one; a team can back one with its
	// KMS.
	Sealer idemstore.Sealer
}

// Engine enforces the policies of one API. It is safe for concurrent use.
type Engine struct {
	store        idemstore.Store
	tx           idemstore.Transactor // nil when the store has no transactions
	tenant       func(*http.Request) (string, bool)
	observer     Observer
	log          *slog.Logger
	logKeys      bool
	labelSecret  []byte
	problemBase  string
	maxBody      int64
	storeTimeout time.Duration
	ops          map[string]*operation
	router       router
	secrets      []idemstore.Secret // Config.Secrets, newest first
	effect       idemstore.Secret   // Config.EffectSecret, or its default
	// effectStored is set when effect is the secret new rows are written
	// under (Secrets[0], or none), so that a request's stored key is
	// already its key as effect stores it.
	effectStored bool
	rotatedAt    time.Time
	sealer       idemstore.Sealer
	jitter       func(n int) int // Config.RetryAfterJitter
	dupWait      time.Duration
	held         heldKeys
	routed       routedOps // RoutedMiddleware's patterns
	waiters      waiters
}

// operation is a policy prepared for serving.
type operation struct {
	Policy
	template *pathtemplate.Template
	// txUnused is set once a transactional handler was seen not taking its
	// transaction (txNotTaken).
	txUnused    atomic.Bool
	fingerprint *fingerprint.Compiled
	replay      map[string]bool // canonical names of headers kept for replay
	// latency is the handler's observed latency, for the Retry-After of
	// a 409 request-in-progress.
	latency movingmean.Duration
	// unprotected marks a route of Config.Unprotected: only its Method,
	// Path, OperationID and template are set, and the router passes its
	// requests through.
	unprotected bool
}

// New prepares an engine. It refuses a configuration that could leave a
// handler unprotected: a missing store or tenant function, a transactional
// policy on a store without transactions, an invalid policy.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("idem: Config.Store is nil")
	}
	if cfg.Tenant == nil {
		return nil, errors.New("idem: Config.Tenant is nil; the engine needs the authenticated tenant (a service without tenants sets Tenant: idem.SingleTenant(\"default\"))")
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
	}
	e.tx, _ = cfg.Store.(idemstore.Transactor)
	rt, err := newRouter(cfg.BasePath)
	if err != nil {
		return nil, err
	}
	e.router = rt
	if e.log == nil {
		e.log = slog.Default()
	}
	if err := checkSecretLength("Config.KeyLabelSecret", cfg.KeyLabelSecret); err != nil {
		return nil, err
	}
	if e.secrets, err = prepareSecrets(cfg); err != nil {
		return nil, err
	}
	if e.effect, e.effectStored, err = prepareEffectSecret(cfg); err != nil {
		return nil, err
	}
	e.rotatedAt, e.sealer = cfg.SecretsRotatedAt, cfg.Sealer
	e.dupWait = max(cfg.DuplicateWait, 0)
	e.waiters.max = cmp.Or(max(cfg.DuplicateWaiters, 0), 1)
	if e.jitter = cfg.RetryAfterJitter; e.jitter == nil {
		e.jitter = newLockedRand().IntN
	}
	labels := cfg.KeyLabelSecret
	if len(e.secrets) > 0 {
		labels = cfg.Secrets[0]
	}
	var randomLabels bool
	e.labelSecret, randomLabels = labelSecret(labels)
	if randomLabels && !e.logKeys {
		e.log.Info("Config.KeyLabelSecret is not set: key labels in logs are keyed with a random secret and cannot be looked up with idemgen keys")
	}
	if e.problemBase == "" {
		e.problemBase = problem.DefaultBase
	}
	e.storeTimeout = cfg.StoreTimeout
	if e.storeTimeout <= 0 {
		e.storeTimeout = 10 * time.Second
	}
	if e.maxBody <= 0 {
		e.maxBody = 1 << 20
	}
	scopes := make(map[string]string) // stored name → operation ID
	for _, p := range cfg.Policies {
		op, err := e.prepare(p)
		if err != nil {
			return nil, fmt.Errorf("idem: operation %s %s (%s): %w", p.Method, p.Path, p.OperationID, err)
		}
		if _, dup := e.ops[p.OperationID]; dup {
			return nil, fmt.Errorf("idem: operation ID %q appears twice", p.OperationID)
		}
		e.ops[p.OperationID] = op
		if other, dup := scopes[p.scopeID()]; dup {
			return nil, fmt.Errorf("idem: operations %s and %s would store their keys under one name %q", other, p.OperationID, p.scopeID())
		}
		scopes[p.scopeID()] = p.OperationID
		if err := e.router.add(op); err != nil {
			return nil, err
		}
	}
	for _, r := range cfg.Unprotected {
		t, err := pathtemplate.Parse(r.Path)
		if err != nil {
			return nil, fmt.Errorf("idem: unprotected route %s %s: %w", r.Method, r.Path, err)
		}
		op := &operation{Policy: Policy{Method: r.Method, Path: r.Path, OperationID: r.OperationID}, template: t, unprotected: true}
		if err := e.router.add(op); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Engine) prepare(p Policy) (*operation, error) {
	switch {
	case p.Method != http.MethodPost && p.Method != http.MethodPatch:
		return nil, fmt.Errorf("method %s cannot carry a policy; only POST and PATCH", p.Method)
	case p.Scope != ScopeOperation && p.Scope != ScopeTenant:
		return nil, fmt.Errorf("unknown scope %q", p.Scope)
	case p.KeyMaxLength < 1 || p.KeyMaxLength > key.MaxLength:
		return nil, fmt.Errorf("KeyMaxLength %d is outside 1..%d", p.KeyMaxLength, key.MaxLength)
	case p.Lease < time.Microsecond || p.TTL <= p.Lease:
		// Claim.Check's floor: a shorter lease would fail every claim.
		return nil, fmt.Errorf("lease %s must be at least 1µs and shorter than ttl %s", p.Lease, p.TTL)
	case p.MaxSnapshotBytes < 0:
		return nil, fmt.Errorf("MaxSnapshotBytes %d is negative", p.MaxSnapshotBytes)
	case p.OnLeaseExpiry != idemstore.Takeover && p.OnLeaseExpiry != idemstore.FailClosed:
		return nil, fmt.Errorf("unknown OnLeaseExpiry %q", p.OnLeaseExpiry)
	case p.Key.Name == "":
		return nil, errors.New("the key source has no name")
	case p.Key.In != key.InHeader && p.Key.In != key.InBody && p.Key.In != key.InQuery:
		return nil, fmt.Errorf("unknown key location %q", p.Key.In)
	case p.Transactional && e.tx == nil:
		return nil, fmt.Errorf("the policy is transactional but the store %T has no transactions", e.store)
	}
	if p.Key.In == key.InHeader {
		if why := key.RefusedHeader(p.Key.Name); why != "" {
			return nil, fmt.Errorf("header %s cannot carry the key: %s", http.CanonicalHeaderKey(p.Key.Name), why)
		}
	}
	if p.Key.In == key.InBody {
		if err := fingerprint.CheckPointer(p.Key.Name); err != nil {
			return nil, fmt.Errorf("the body key: %w", err)
		}
	}
	t, err := pathtemplate.Parse(p.Path)
	if err != nil {
		return nil, err
	}
	if !sameNames(t.Params(), p.Fingerprint.Path) {
		// A path parameter left out of the fingerprint would let one key
		// replay another resource's answer.
		return nil, fmt.Errorf("fingerprint.Path %v must list the template's path parameters %v", p.Fingerprint.Path, t.Params())
	}
	fp, err := fingerprint.Compile(p.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	if err := e.checkEffects(p); err != nil {
		return nil, err
	}
	op := &operation{Policy: p, template: t, fingerprint: fp, replay: make(map[string]bool)}
	for _, h := range append(AlwaysReplayed(), p.ReplayHeaders...) {
		name := http.CanonicalHeaderKey(h)
		if why := idemstore.NeverStored(name); why != "" {
			return nil, fmt.Errorf("header %s can never be replayed: %s", name, why)
		}
		op.replay[name] = true
	}
	return op, nil
}

// sameNames reports whether a and b hold the same names in any order.
func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
