package idem

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"

	"github.com/idemgen/idemgen/runtime/fingerprint"
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
