package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// hold is a won claim (docs/semantics.md §9); how it ends differs between
// a plain claim and one held inside a transaction.
type hold interface {
	// abandon ends the claim after the handler panicked or gave no answer.
	abandon(ctx context.Context) error
	// release lets a retry run the handler again.
	release(ctx context.Context) error
	// complete stores the response; ErrFenced when the claim was taken over.
	complete(ctx context.Context, resp idemstore.Response) error
	// tx is the transaction handed to the handler, or nil.
	tx() idemstore.Tx
}

// plainHold is a claim row committed on its own: the handler's effects are
// outside the store's reach.
type plainHold struct {
	store idemstore.Store
	c     idemstore.Claim
}

func (h plainHold) abandon(ctx context.Context) error {
	return h.store.Abandon(ctx, h.c.Identity, h.c.Token, h.c.OnLeaseExpiry)
}

func (h plainHold) release(ctx context.Context) error {
	return h.store.Release(ctx, h.c.Identity, h.c.Token)
}

func (h plainHold) complete(ctx context.Context, resp idemstore.Response) error {
	return h.store.Complete(ctx, h.c.Identity, h.c.Token, resp)
}

func (h plainHold) tx() idemstore.Tx { return nil }

// txHold is a claim inside the handler's transaction: a panic or an
// unstored status rolls the handler's writes back with the claim.
type txHold struct{ t idemstore.Tx }

func (h txHold) abandon(ctx context.Context) error { return h.t.Rollback(ctx) }

func (h txHold) release(ctx context.Context) error { return h.t.Rollback(ctx) }

func (h txHold) complete(ctx context.Context, resp idemstore.Response) error {
	return h.t.Commit(ctx, resp)
}

func (h txHold) tx() idemstore.Tx { return h.t }

// durableTxHold is a committed claim plus a plain transaction for the
// handler, begun when the handler asks for it (serveDurableTx): the
// transaction ends first, then the claim.
type durableTxHold struct {
	plain plainHold
	t     *lazyTx
}

func (h durableTxHold) abandon(ctx context.Context) error {
	return errors.Join(h.t.Rollback(ctx), h.plain.abandon(ctx))
}

func (h durableTxHold) release(ctx context.Context) error {
	return errors.Join(h.t.Rollback(ctx), h.plain.release(ctx))
}

func (h durableTxHold) complete(ctx context.Context, resp idemstore.Response) error {
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

func (h durableTxHold) tx() idemstore.Tx { return h.t }

// abandon ends a claim whose handler panicked or gave no answer. When that
// marks the key indeterminate it says so at WARN, with what an operator
// needs to find the row (idemgen keys show --label).
func (e *Engine) abandon(r *http.Request, q *request, h hold) error {
	err := e.endClaim(r, q, h.abandon)
	if err == nil && abandonFailsClosed(h) {
		e.log.WarnContext(r.Context(), "idempotency key is now indeterminate (outcome unknown): its handler did not finish; resolve it with idemgen keys",
			"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key))
	}
	return err
}

// abandonFailsClosed reports whether abandoning h marks its key
// indeterminate; a claim inside the handler's transaction is rolled back
// with it instead.
func abandonFailsClosed(h hold) bool {
	switch h := h.(type) {
	case plainHold:
		return h.c.OnLeaseExpiry == idemstore.FailClosed
	case durableTxHold:
		return h.plain.c.OnLeaseExpiry == idemstore.FailClosed
	}
	return false
}

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
	out := fmt.Errorf("%w: %s, and the handler's writes around its transaction may stand: %w", idemstore.ErrOutcomeUnknown, what, err)
	if abandonErr != nil && !errors.Is(abandonErr, idemstore.ErrFenced) {
		out = fmt.Errorf("%w (marking the key indeterminate failed: %v)", out, abandonErr)
	}
	return out
}

// errCommitted marks a completion that failed after the handler's
// transaction committed: the handler's writes are durable, so its answer
// is the truth, as for a plain claim.
var errCommitted = errors.New("idem: the handler's transaction committed, but the key's completion failed")
