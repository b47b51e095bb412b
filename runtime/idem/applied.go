package idem

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// mark records in the request that the engine applied q's policy, so that
// a per-route Handler or TxHandler behind the middleware knows which one;
// only a request about to reach the handler pays for it. The mark lives in
// q and is itself the handler's context, so marking costs only the copy of
// the request that carries it.
func (e *Engine) mark(r *http.Request, q *request) *http.Request {
	q.mark = applied{Context: r.Context(), op: q.op, engine: e, problemBase: e.problemBase, id: q.id, anchor: q.anchor, raw: q.raw, effectSecret: e.effectSecret()}
	q.applied = &q.mark
	return r.WithContext(q.applied)
}

// applied records, in a request's context, that the engine applied an
// operation's policy, and carries the transaction a transactional handler
// writes with. It is the context the handler runs under: the request's
// own, which it embeds, answering appliedKey with itself (Value).
type applied struct {
	context.Context
	op *operation
	// tx is the request's transaction, set before the handler runs; its
	// Driver is what the handler takes.
	tx idemstore.Tx
	// taken is set when the handler took tx (TxFrom, TxHandler).
	taken atomic.Bool
	// notExecuted is set when the handler said the operation did not
	// start executing (NotExecuted).
	notExecuted atomic.Bool
	// problemBase is the engine's Config.ProblemBase, for the problems
	// TxHandler answers.
	problemBase string
	// id is the identity the request's row is stored under; its Key is
	// empty for a request without a key.
	id idemstore.Identity
	// anchor and raw name the request for its effect keys and phases
	// (request.anchor, effectAnchor); anchor.Key is empty for a request
	// without a key.
	anchor idemstore.Identity
	raw    [32]byte
	// effectSecret derives the request's effect keys (EffectKey).
	effectSecret *idemstore.Secret
	// engine serves the request; Phase records through its store.
	engine *Engine
	// phases are the phases the request has run (Phase).
	phases phaseNames
}

type appliedKey struct{}

// Value answers appliedKey with a, and any other key as the request's
// context does.
func (a *applied) Value(key any) any {
	if _, ok := key.(appliedKey); ok {
		return a
	}
	return a.Context.Value(key)
}

func appliedFrom(ctx context.Context) *applied {
	a, _ := ctx.Value(appliedKey{}).(*applied)
	return a
}
