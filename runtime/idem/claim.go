package idem

import (
	"context"
	"net/http"
)

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
