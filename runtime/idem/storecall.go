package idem

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// storeClaim makes one claim, committed on its own, under a claim context.
func (e *Engine) storeClaim(r *http.Request, q *request, c idemstore.Claim) (idemstore.Result, error) {
	return e.timed(q, func() (idemstore.Result, error) {
		ctx, cancel := e.claimContext(r)
		defer cancel()
		return e.store.Claim(ctx, c)
	})
}

// timed runs one store call that claims, adding its time to the
// request's StoreDuration.
func (e *Engine) timed(q *request, f func() (idemstore.Result, error)) (idemstore.Result, error) {
	t := time.Now()
	res, err := f()
	q.event.StoreDuration += time.Since(t)
	return res, err
}

// storeErr is timed for a store call that returns only an error.
func (e *Engine) storeErr(q *request, f func() error) error {
	t := time.Now()
	err := f()
	q.event.StoreDuration += time.Since(t)
	return err
}

// storeContext is the context of one store call that changes a key. It
// keeps the request's values but not its cancellation: a client that hangs
// up must not cut a claim, completion or release off half-way (docs/semantics.md
// §7.3). It is bounded by Config.StoreTimeout so that a hung store cannot
// hold a request forever.
func (e *Engine) storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), e.storeTimeout)
}

// claimContext is storeContext for a claim, whose waiting (for a lock, a
// connection) ends when the client hangs up (idemstore.WithWait): a claim
// that waited past its client's patience would be won only to be released
// again, and its retry meanwhile told that the key is in flight. The write
// itself is not cut off (docs/semantics.md §7.3).
func (e *Engine) claimContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := e.storeContext(r)
	return idemstore.WithWait(ctx, r.Context()), cancel
}

// endClaim runs one store call that ends a claim, under a context of its
// own (storeContext).
func (e *Engine) endClaim(r *http.Request, q *request, f func(context.Context) error) error {
	return e.storeErr(q, func() error {
		ctx, cancel := e.storeContext(r)
		defer cancel()
		return f(ctx)
	})
}

func (e *Engine) storeUnavailable(w http.ResponseWriter, r *http.Request, q *request, step string, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.ErrorContext(r.Context(), "idempotency store failed; the handler was not run or its writes were rolled back",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "step", step, "err", err)
	p := e.answer(problem.StoreFailed)
	p.RetryAfter = storeUnavailableRetryAfter
	e.send(w, q, p)
}

// endedWithConnection reports whether a failed release is one the database
// made anyway: the transaction's connection closed (a client that left
// while its handler's statement ran, most often) and the claim ended with
// it (idemstore.ErrClaimEnded). Nothing stays for its lease, so it is
// logged at DEBUG, not as a key an operator should wait out.
func (e *Engine) endedWithConnection(ctx context.Context, q *request, err error) bool {
	if !errors.Is(err, idemstore.ErrClaimEnded) {
		return false
	}
	e.log.DebugContext(ctx, "idempotency claim ended with its connection",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
	return true
}
