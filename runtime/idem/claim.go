package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// storeContext is the context of one store call that changes a key. It
// keeps the request's values but not its cancellation: a client that hangs
// up must not cut a claim, completion or release off half-way (SEMANTICS
// §7). It is bounded by Config.StoreTimeout so that a hung store cannot
// hold a request forever.
func (e *Engine) storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), e.storeTimeout)
}

// serveClaim runs a non-transactional request: claim, handler, complete.
func (e *Engine) serveClaim(w http.ResponseWriter, r *http.Request, q *request, c Claim, next http.Handler) {
	res, won := e.claim(w, r, q, c)
	if !won {
		return
	}
	if len(q.older) > 0 && e.metUnderOlder(w, r, q, plainHold{e.store, c}) {
		return
	}
	e.run(w, r, q, plainHold{e.store, c}, res, next)
}

// claim makes a plain claim committed on its own. When it is not won, the
// request has been answered (the stored row, or 503) and won is false.
func (e *Engine) claim(w http.ResponseWriter, r *http.Request, q *request, c Claim) (res Result, won bool) {
	res, err := e.timed(q, func() (Result, error) {
		ctx, cancel := e.storeContext(r)
		defer cancel()
		return e.store.Claim(ctx, c)
	})
	switch {
	case err != nil:
		e.claimFailed(w, r, q, c, err)
		return res, false
	case !res.Won:
		e.answerExisting(w, r, q, c, res.Existing)
		return res, false
	}
	return res, true
}

// claimFailed answers a claim the store did not confirm. The claim may
// still have been written (a timeout after the commit), and the handler
// certainly did not run, so the claim is released by its token: a retry
// must not meet "in progress" or "outcome unknown" for a request that never
// ran. Release is fenced, so it never touches another request's row.
func (e *Engine) claimFailed(w http.ResponseWriter, r *http.Request, q *request, c Claim, err error) {
	ctx, cancel := e.storeContext(r)
	defer cancel()
	if rerr := e.store.Release(ctx, c.Identity, c.Token); rerr != nil && !errors.Is(rerr, ErrFenced) {
		e.log.WarnContext(ctx, "a claim the store did not confirm could not be released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", rerr)
	}
	e.storeUnavailable(w, r, q, "claim", err)
}

// serveTx runs a transactional request: the claim, the handler's writes and
// the completion share one database transaction (SEMANTICS §5).
func (e *Engine) serveTx(w http.ResponseWriter, r *http.Request, q *request, c Claim, next http.Handler) {
	if len(q.older) > 0 {
		held, met := e.holdOlder(w, r, q)
		defer e.releaseOlder(r, q, held)
		if met {
			return
		}
	}
	if q.op.txUnused.Load() {
		e.serveDurableTx(w, r, q, c, next)
		return
	}
	var tx Tx
	res, err := e.timed(q, func() (Result, error) {
		ctx, cancel := e.storeContext(r)
		defer cancel()
		res, t, err := e.tx.ClaimTx(ctx, c)
		tx = t
		return res, err
	})
	if err != nil {
		// A transactional claim dies with its transaction; there is
		// nothing to release.
		e.storeUnavailable(w, r, q, "claim", err)
		return
	}
	if !res.Won {
		e.answerExisting(w, r, q, c, res.Existing)
		return
	}
	e.run(w, r, q, txHold{tx}, res, next)
}

// serveDurableTx serves a transactional operation whose handler was seen
// writing without its transaction. Its claim is committed on its own before
// the handler runs and fails closed, so a crash leaves the key held (and
// then indeterminate) instead of freeing it for a retry that could repeat
// writes made outside the transaction. The handler's transaction begins
// only if the handler asks for it (lazyTx): one begun up front could hold
// a lock that the handler's own writes, made around it, wait for.
func (e *Engine) serveDurableTx(w http.ResponseWriter, r *http.Request, q *request, c Claim, next http.Handler) {
	c.OnLeaseExpiry = FailClosed
	res, won := e.claim(w, r, q, c)
	if !won {
		return
	}
	e.run(w, r, q, durableTxHold{plainHold{e.store, c}, e.lazyTx(r, q)}, res, next)
}

// hold is a won claim; how it ends differs between a plain claim and one
// held inside a transaction.
type hold interface {
	// abandon ends the claim after the handler panicked or gave no answer.
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

// keylessDurableHold is the transaction of a keyless request to an
// operation whose handler writes around its transaction (durable mode):
// when it cannot commit, the writes made around it may stand, so the
// outcome is unknown rather than "not processed".
type keylessDurableHold struct{ txHold }

func (h keylessDurableHold) complete(ctx context.Context, resp Response) error {
	if err := h.txHold.complete(ctx, resp); err != nil {
		return writesMayStand("the handler's transaction did not commit", err, nil)
	}
	return nil
}

// durableTxHold is a committed claim plus a plain transaction for the
// handler, begun when the handler asks for it (serveDurableTx): the
// transaction ends first, then the claim.
type durableTxHold struct {
	plain plainHold
	t     *lazyTx
}

func (h durableTxHold) abandon(ctx context.Context) error {
	return errors.Join(h.t.Release(ctx), h.plain.abandon(ctx))
}
func (h durableTxHold) release(ctx context.Context) error {
	return errors.Join(h.t.Release(ctx), h.plain.release(ctx))
}
func (h durableTxHold) complete(ctx context.Context, resp Response) error {
	if err := h.t.Commit(ctx, resp); err != nil {
		// Writes made outside the transaction may have happened, so
		// neither "not processed" nor the handler's answer is the truth:
		// the claim fails closed (indeterminate) and the client hears
		// that the outcome is unknown.
		return writesMayStand("the handler's transaction did not commit", err, h.plain.abandon(ctx))
	}
	if err := h.plain.complete(ctx, resp); err != nil {
		return fmt.Errorf("%w: %w", errCommitted, err)
	}
	return nil
}

func (h durableTxHold) tx() Tx { return h.t }

// unstorable ends h when its response cannot be stored (it cannot be
// sealed). Nothing may commit then: a transaction is rolled back; a plain
// claim stays in flight, as after a failed completion. In durable mode the
// handler's writes around its transaction may stand while the claim is
// abandoned (indeterminate), so the outcome is unknown, not "not
// processed".
func unstorable(ctx context.Context, h hold, err error) error {
	if h.tx() == nil {
		return err
	}
	aerr := h.abandon(ctx)
	if _, durable := h.(durableTxHold); !durable {
		return errors.Join(err, aerr)
	}
	return writesMayStand("the response could not be stored", err, aerr)
}

// writesMayStand is the error of a durable-mode request (its handler writes
// around its transaction) that went wrong as what says, for err: the
// writes around the transaction may stand, so the outcome is unknown, not
// "not processed". abandonErr is how marking the key indeterminate went;
// ErrFenced means another request holds the key already, and a key left
// in flight fails closed when its lease ends.
func writesMayStand(what string, err, abandonErr error) error {
	out := fmt.Errorf("%w: %s, and the handler's writes around its transaction may stand: %w", ErrOutcomeUnknown, what, err)
	if abandonErr != nil && !errors.Is(abandonErr, ErrFenced) {
		out = fmt.Errorf("%w (marking the key indeterminate failed: %v)", out, abandonErr)
	}
	return out
}

// errCommitted marks a completion that failed after the handler's
// transaction committed: the handler's writes are durable, so its answer
// is the truth, as for a plain claim.
var errCommitted = errors.New("idem: the handler's transaction committed, but the key's completion failed")
