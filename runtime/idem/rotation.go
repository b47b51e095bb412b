package idem

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// metUnderOlder looks, after own's claim was won, for a row of the same
// request written under an older secret (Config.Secrets), by claiming the
// key under each one in turn. A claim that wins found nothing and is
// released at once; one that loses met the row that stands, which answers
// the request instead, and own's claim is released. Own's claim is held
// throughout, so a replica still writing under the older secret either
// meets it or is met: never do both run the handler. It reports whether
// the request was answered.
func (e *Engine) metUnderOlder(w http.ResponseWriter, r *http.Request, q *request, own plainHold) bool {
	for _, c := range q.older {
		ctx, cancel := e.storeContext(r)
		res, err := e.timed(q, func() (idemstore.Result, error) { return e.store.Claim(ctx, c) })
		switch {
		case err != nil:
			err = errors.Join(err, e.releaseProbe(ctx, q, c), own.release(ctx))
			cancel()
			e.storeUnavailable(w, r, q, "claim under an older secret", err)
			return true
		case res.Won:
			_ = e.releaseProbe(ctx, q, c)
			cancel()
		default:
			err := own.release(ctx)
			cancel()
			if err != nil && !e.endedWithConnection(r.Context(), q, err) {
				e.log.WarnContext(r.Context(), "idempotency claim not released; it stays until its lease ends",
					"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
			}
			q.id, q.key = c.Identity, c.Key
			e.answerExisting(w, r, q, c, res.Existing)
			return true
		}
	}
	return false
}

// holdOlder claims the key under each older secret before a transactional
// claim and holds what it wins until the request ends (releaseOlder): a
// claim under an older secret made after the handler's transaction began
// could wait on that transaction's own lock (SQLite has one writer). A
// claim that loses met the row that answers the request; it reports
// whether the request was answered.
func (e *Engine) holdOlder(w http.ResponseWriter, r *http.Request, q *request) (held []idemstore.Claim, answered bool) {
	for _, c := range q.older {
		res, err := e.storeClaim(r, q, c)
		switch {
		case err != nil:
			held = append(held, c) // the claim may have been written
			e.storeUnavailable(w, r, q, "claim under an older secret", err)
			return held, true
		case !res.Won:
			q.id, q.key = c.Identity, c.Key
			e.answerExisting(w, r, q, c, res.Existing)
			return held, true
		}
		held = append(held, c)
	}
	return held, false
}

// releaseOlder releases the claims holdOlder won.
func (e *Engine) releaseOlder(r *http.Request, q *request, held []idemstore.Claim) {
	if len(held) == 0 {
		return
	}
	ctx, cancel := e.storeContext(r)
	defer cancel()
	for _, c := range held {
		_ = e.releaseProbe(ctx, q, c)
	}
}

// releaseProbe releases a claim made under an older secret. One that stays
// (the store failed) is in flight under the request's token until its
// lease ends, and is then judged like any abandoned claim.
func (e *Engine) releaseProbe(ctx context.Context, q *request, c idemstore.Claim) error {
	err := e.store.Release(ctx, c.Identity, c.Token)
	if err != nil && !errors.Is(err, idemstore.ErrFenced) {
		e.log.WarnContext(ctx, "a claim under an older secret could not be released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(c.Key), "err", err)
		return err
	}
	return nil
}
