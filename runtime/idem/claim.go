package idem

import (
	"errors"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// serveClaim runs a non-transactional request: claim, handler, complete.
func (e *Engine) serveClaim(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, next http.Handler) {
	res, won := e.claim(w, r, q, c)
	if !won {
		return
	}
	if len(q.older) > 0 && e.metUnderOlder(w, r, q, plainHold{e.store, c}) {
		return
	}
	e.run(w, r, q, plainHold{e.store, c}, originOf(res), next)
}

// claim makes a plain claim committed on its own. When it is not won, the
// request has been answered (the stored row, or 503) and won is false.
func (e *Engine) claim(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim) (res idemstore.Result, won bool) {
	res, err := e.storeClaim(r, q, c)
	switch {
	case errors.Is(err, idemstore.ErrWaitEnded):
		e.gone(w, q, err)
		return res, false
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
func (e *Engine) claimFailed(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, err error) {
	ctx, cancel := e.storeContext(r)
	defer cancel()
	if rerr := e.store.Release(ctx, c.Identity, c.Token); rerr != nil && !errors.Is(rerr, idemstore.ErrFenced) {
		e.log.WarnContext(ctx, "a claim the store did not confirm could not be released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", rerr)
	}
	e.storeUnavailable(w, r, q, "claim", err)
}

// serveTx runs a transactional request: the claim, the handler's writes and
// the completion share one database transaction (docs/semantics.md §5).
func (e *Engine) serveTx(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, next http.Handler) {
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
	var tx idemstore.Tx
	res, err := e.timed(q, func() (idemstore.Result, error) {
		ctx, cancel := e.claimContext(r)
		defer cancel()
		res, t, err := e.tx.ClaimTx(ctx, c)
		tx = t
		return res, err
	})
	if errors.Is(err, idemstore.ErrWaitEnded) {
		e.gone(w, q, err)
		return
	}
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
	e.run(w, r, q, txHold{tx}, originOf(res), next)
}

// serveDurableTx serves a transactional operation whose handler was seen
// writing without its transaction. Its claim is committed on its own before
// the handler runs and fails closed, so a crash leaves the key held (and
// then indeterminate) instead of freeing it for a retry that could repeat
// writes made outside the transaction. The handler's transaction begins
// only if the handler asks for it (lazyTx): one begun up front could hold
// a lock that the handler's own writes, made around it, wait for.
func (e *Engine) serveDurableTx(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, next http.Handler) {
	c.OnLeaseExpiry = idemstore.FailClosed
	res, won := e.claim(w, r, q, c)
	if !won {
		return
	}
	e.run(w, r, q, durableTxHold{plainHold{e.store, c}, e.lazyTx(r, q)}, originOf(res), next)
}
