package mutant

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// calls are a store's methods as a mutant sees them: each is the wrapped
// store's own until the mutant replaces it.
type calls struct {
	claim    func(ctx context.Context, c idemstore.Claim) (idemstore.Result, error)
	complete func(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error
	release  func(ctx context.Context, id idemstore.Identity, token string) error
	abandon  func(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error
	// claimTx and commit are set only for an idemstore.Transactor.
	claimTx func(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error)
	// commit ends inner, the wrapped store's own transaction.
	commit func(ctx context.Context, inner idemstore.Tx, resp idemstore.Response) error
	// loadPhase and recordPhase are set only for an idemstore.PhaseStore.
	loadPhase   func(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error)
	recordPhase func(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error)
}

// newCalls is s's own methods.
func newCalls(s idemstore.Store) *calls {
	c := &calls{claim: s.Claim, complete: s.Complete, release: s.Release, abandon: s.Abandon}
	if tr, ok := s.(idemstore.Transactor); ok {
		c.claimTx = tr.ClaimTx
		c.commit = func(ctx context.Context, inner idemstore.Tx, resp idemstore.Response) error {
			return inner.Commit(ctx, resp)
		}
	}
	if ps, ok := s.(idemstore.PhaseStore); ok {
		c.loadPhase, c.recordPhase = ps.LoadPhase, ps.RecordPhase
	}
	return c
}

// store is a wrapped store whose methods go through its calls.
type store struct {
	inner idemstore.Store
	c     *calls
}

func (s *store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	return s.c.claim(ctx, c)
}

func (s *store) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	return s.c.complete(ctx, id, token, resp)
}

func (s *store) Release(ctx context.Context, id idemstore.Identity, token string) error {
	return s.c.release(ctx, id, token)
}

func (s *store) Abandon(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
	return s.c.abandon(ctx, id, token, mode)
}

// sweeping is a wrapped store that is an idemstore.Sweeper too: sweeps
// pass through.
type sweeping struct {
	idemstore.Store
	sw idemstore.Sweeper
}

func (s sweeping) Sweep(ctx context.Context, limit int) (int, error) { return s.sw.Sweep(ctx, limit) }

// sweepingTx is a wrapped idemstore.Transactor that is an
// idemstore.Sweeper too.
type sweepingTx struct {
	*txStore
	sw idemstore.Sweeper
}

func (s sweepingTx) Sweep(ctx context.Context, limit int) (int, error) { return s.sw.Sweep(ctx, limit) }

// txStore is a wrapped idemstore.Transactor.
type txStore struct {
	*store
	tr idemstore.Transactor
}

func (s *txStore) ClaimTx(ctx context.Context, c idemstore.Claim) (idemstore.Result, idemstore.Tx, error) {
	res, inner, err := s.c.claimTx(ctx, c)
	if inner == nil {
		return res, nil, err
	}
	return res, &tx{inner: inner, s: s.store}, err
}

func (s *txStore) Begin(ctx context.Context, lease time.Duration) (idemstore.Tx, error) {
	return s.tr.Begin(ctx, lease)
}

// tx is a transaction of a wrapped store.
type tx struct {
	inner idemstore.Tx
	s     *store
}

func (t *tx) Driver() any { return t.inner.Driver() }

func (t *tx) Commit(ctx context.Context, resp idemstore.Response) error {
	return t.s.c.commit(ctx, t.inner, resp)
}

func (t *tx) Rollback(ctx context.Context) error { return t.inner.Rollback(ctx) }

// Unwrap returns the wrapped store's own transaction of a mutant's tx, and
// any other tx as it is: for a test's means of crashing a transaction,
// which needs the store's own.
func Unwrap(t idemstore.Tx) idemstore.Tx {
	if w, ok := t.(*tx); ok {
		return w.inner
	}
	return t
}

// phases are a wrapped idemstore.PhaseStore's own methods, through its
// calls.
type phases struct {
	ps idemstore.PhaseStore
	c  *calls
}

func (p *phases) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	return p.c.loadPhase(ctx, id, name)
}

func (p *phases) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	return p.c.recordPhase(ctx, id, name, result, ttl)
}

func (p *phases) PhasesBesideTx() bool { return p.ps.PhasesBesideTx() }

// A wrapped store of each kind that keeps phases too.
type (
	phasedStore struct {
		*store
		*phases
	}
	phasedSweeping struct {
		sweeping
		*phases
	}
	phasedTxStore struct {
		*txStore
		*phases
	}
	phasedSweepingTx struct {
		sweepingTx
		*phases
	}
)

// wrap returns s with its methods going through c; it is an
// idemstore.Transactor, an idemstore.Sweeper and an idemstore.PhaseStore
// when s is.
func wrap(s idemstore.Store, c *calls) idemstore.Store {
	w := &store{inner: s, c: c}
	sw, sweeps := s.(idemstore.Sweeper)
	tr, isTx := s.(idemstore.Transactor)
	ps, keepsPhases := s.(idemstore.PhaseStore)
	p := &phases{ps: ps, c: c}
	switch {
	case isTx && sweeps && keepsPhases:
		return phasedSweepingTx{sweepingTx{&txStore{store: w, tr: tr}, sw}, p}
	case isTx && sweeps:
		return sweepingTx{&txStore{store: w, tr: tr}, sw}
	case isTx && keepsPhases:
		return phasedTxStore{&txStore{store: w, tr: tr}, p}
	case isTx:
		return &txStore{store: w, tr: tr}
	case sweeps && keepsPhases:
		return phasedSweeping{sweeping{w, sw}, p}
	case sweeps:
		return sweeping{w, sw}
	case keepsPhases:
		return phasedStore{w, p}
	}
	return w
}
