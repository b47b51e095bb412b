package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ErrNoPhases is wrapped by the error of Phase when the request's store
// cannot record phases: it is no idemstore.PhaseStore, or the request
// runs inside a transaction of a store whose phases cannot commit beside
// it (SQLite's handler transaction holds the database's only write lock).
// New refuses a policy that declares a recovery point on such a store.
var ErrNoPhases = errors.New("idem: the store cannot record a phase of this request")

// ErrPhaseReused is wrapped by the error of Phase when a request runs a
// phase name it already ran: a recorded result would be handed to a step
// it was not recorded for.
var ErrPhaseReused = errors.New("idem: a phase name is used twice in one request")

// Phase runs one phase of the request ctx belongs to as a recovery point
// (docs/semantics.md §8.2): when a run of the request before this one
// recorded the phase, Phase returns that run's result and does not call
// run; otherwise it calls run with the phase's effect key (EffectKey of
// name), records its result durably, on its own and at once, and returns
// the result recorded first. A retry or takeover after a crash therefore
// calls the downstream again only for a phase whose result was never
// recorded, and then with the same effect key.
//
// An error from run is returned and nothing is recorded: the next run
// calls run again. An answer the handler must keep (a declined card)
// is a result, not an error. A record that fails after run returned is an
// error too, and the next run calls run again with the same key; the
// downstream must honour the key for that call to be safe.
//
// Under Config.Sealer the result is stored sealed (idemstore.SealPhase),
// bound to the request and the phase's name; a recorded result that
// cannot be opened is an error wrapping idemstore.ErrUnreadable, and run
// is not called.
//
// The error wraps ErrNotProtected outside a keyed request, ErrEffectName
// for a bad name, ErrPhaseReused for a name this request already ran,
// ErrNoPhases when the store cannot record it, and
// idemstore.ErrPhaseResultTooLarge for a result over
// idemstore.MaxPhaseResult.
func Phase(ctx context.Context, name string, run func(ctx context.Context, effectKey string) ([]byte, error)) ([]byte, error) {
	a, err := protectedFrom(ctx, "Phase")
	if err != nil {
		return nil, err
	}
	if err := checkEffectName(name); err != nil {
		return nil, err
	}
	ps, err := a.phaseStore()
	if err != nil {
		return nil, err
	}
	if !a.phases.first(name) {
		return nil, fmt.Errorf("%w: %q in operation %s", ErrPhaseReused, name, a.op.OperationID)
	}
	e, anchor := a.engine, a.effectAnchor()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.storeTimeout)
	got, found, err := ps.LoadPhase(sctx, anchor, name)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("idem: phase %q: loading its record: %w", name, err)
	}
	if found {
		// A record that cannot be opened fails the request rather than
		// run the phase again.
		return idemstore.OpenPhase(e.sealer, anchor, name, got)
	}
	res, err := run(ctx, a.effectSecret.EffectKey(anchor, name))
	if err != nil {
		return nil, err
	}
	// The phase happened: its record is written whether or not the
	// client is still there.
	sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), e.storeTimeout)
	defer cancel()
	stored, err := e.recordPhase(sctx, ps, anchor, name, res, phaseTTL(a.op.Policy))
	if err != nil {
		return nil, fmt.Errorf("idem: phase %q ran but its result was not recorded; the next run calls it again with the same effect key: %w", name, err)
	}
	return idemstore.OpenPhase(e.sealer, anchor, name, stored)
}

// phaseTTL is how long a phase record of an operation under p lives from
// when it was made: the ttl and a lease (docs/semantics.md §8.2). A
// client's retries start within the ttl of its first attempt, and a run
// reaches its phases within its lease; a record that lived only the ttl
// would be gone for a retry sent just inside it whose handler reaches the
// phase a moment later than the first run did. The key's row lives no
// longer: a takeover within the ttl moves its expiry to the end of its
// lease at most (docs/semantics.md §7.4).
func phaseTTL(p Policy) time.Duration { return p.TTL + p.Lease }

// recordPhase records res as phase name of id, sealed when the engine has
// a Sealer and escaped if it begins as a sealed one does otherwise
// (idemstore.SealPhase), and returns the record that stands, as stored.
func (e *Engine) recordPhase(ctx context.Context, ps idemstore.PhaseStore, id idemstore.Identity, name string, res []byte, ttl time.Duration) ([]byte, error) {
	stored, err := idemstore.SealPhase(e.sealer, id, name, res)
	if err != nil {
		return nil, err
	}
	return ps.RecordPhase(ctx, id, name, stored, ttl)
}

// phaseStore is the store that records a's phases.
func (a *applied) phaseStore() (idemstore.PhaseStore, error) {
	ps, ok := a.engine.store.(idemstore.PhaseStore)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: the store %T keeps no phases", ErrNoPhases, a.engine.store)
	case a.tx != nil && !ps.PhasesBesideTx():
		return nil, fmt.Errorf("%w: operation %s is transactional, and the store %T cannot commit a phase while the request's transaction holds its write lock", ErrNoPhases, a.op.OperationID, a.engine.store)
	}
	return ps, nil
}

// phaseNames are the phases one request has run.
type phaseNames struct {
	mu    sync.Mutex
	names map[string]bool
}

// first records name and reports whether it is new to the request.
func (p *phaseNames) first(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.names[name] {
		return false
	}
	if p.names == nil {
		p.names = make(map[string]bool)
	}
	p.names[name] = true
	return true
}
