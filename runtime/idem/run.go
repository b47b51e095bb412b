package idem

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// run runs the handler under a won claim and ends the claim by the
// response's class. The response is held back until it is stored, so a
// client never sees an answer that its retry would not see too; only a
// non-transactional body that outgrows the snapshot limit streams on.
func (e *Engine) run(w http.ResponseWriter, r *http.Request, q *request, h hold, res idemstore.Result, next http.Handler) {
	defer e.held.hold(e.dupWait > 0, q.id)()
	r = e.mark(r, q)
	limit := q.op.MaxSnapshotBytes
	if tx := h.tx(); tx != nil {
		// Not a byte may leave before the commit.
		limit = -1
		q.applied.tx = tx
	}
	if res.TookOver {
		q.event.State = idemstore.StateInFlight
	}
	if e.goneBeforeRun(w, r, q, h) {
		return
	}
	rec := newRecorder(q, w, limit)
	began := time.Now()
	panicked := e.runHandler(rec, r, next)
	q.op.latency.Observe(time.Since(began))
	if panicked == nil && rec.answered() && rec.statusCode() < 400 &&
		h.tx() != nil && !q.applied.taken.Load() {
		e.txNotTaken(r, q)
	}
	if panicked != nil {
		err := e.abandon(r, q, h)
		e.handlerPanicked(w, r, q, rec, panicked, err)
		return
	}
	if !rec.answered() {
		err := e.abandon(r, q, h)
		e.noAnswer(w, r, q, err)
		return
	}
	status := rec.statusCode()
	q.event.Status = status
	if !e.storable(q.op, status) || e.unexecuted(r, q, h, status) {
		e.endUnstored(w, r, q, h, rec)
		return
	}
	e.endStored(w, r, q, h, rec, res)
}

// endUnstored ends the claim of an answer that is not stored: the claim is
// released, so that a retry runs the handler again, and the answer sent.
func (e *Engine) endUnstored(w http.ResponseWriter, r *http.Request, q *request, h hold, rec *recorder) {
	err := e.endClaim(r, q, h.release)
	if errors.Is(err, idemstore.ErrOutcomeUnknown) {
		// The handler's writes may stand (it ended its transaction
		// itself): its answer, which says the request may be sent
		// again, would invite a second execution.
		e.outcomeUnknown(w, r, q, err)
		return
	}
	if err != nil {
		e.log.WarnContext(r.Context(), "idempotency claim not released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
	}
	e.outcome(q, OutcomeReleased)
	rec.send()
}

// endStored completes the claim with the snapshot of the answer (sealed
// when a Sealer is configured) and sends the answer once it is stored, or
// says why it cannot be.
func (e *Engine) endStored(w http.ResponseWriter, r *http.Request, q *request, h hold, rec *recorder, res idemstore.Result) {
	resp := e.snapshot(q.op, rec)
	err := e.endClaim(r, q, func(ctx context.Context) error {
		stored, err := e.seal(q, resp)
		if err != nil {
			return unstorable(ctx, h, err)
		}
		return h.complete(ctx, stored)
	})
	switch {
	case errors.Is(err, idemstore.ErrFenced):
		e.fenced(w, r, q, rec, err)
	case errors.Is(err, idemstore.ErrOutcomeUnknown):
		e.outcomeUnknown(w, r, q, err)
	case err != nil && h.tx() != nil && !errors.Is(err, errCommitted):
		// The commit failed, so the handler's writes are gone with it:
		// sending its answer would acknowledge what does not exist.
		e.storeUnavailable(w, r, q, "commit", err)
	case err != nil:
		// The handler's effects happened; its answer is the truth. The claim
		// stays in flight and is judged under onLeaseExpiry after its lease.
		e.log.ErrorContext(r.Context(), "idempotency completion failed; the key stays in flight until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
		q.event.Outcome, q.event.Err = OutcomeStoreError, err
		rec.send()
	default:
		e.outcome(q, executedOutcome(res))
		rec.send()
	}
}

// runHandler runs next and reports a panic instead of letting it unwind
// through the engine, so that the claim can be abandoned. http.ErrAbortHandler
// is re-raised after the claim is dealt with, as net/http expects.
func (e *Engine) runHandler(w http.ResponseWriter, r *http.Request, next http.Handler) (panicked any) {
	defer func() {
		if v := recover(); v != nil {
			panicked = v
		}
	}()
	next.ServeHTTP(w, r)
	return nil
}

// unexecuted reports whether the handler said the request did not start
// executing (NotExecuted) and answered a 4xx, so that the answer passes
// through unstored. In durable mode the handler writes around its
// transaction, and what it wrote there cannot be rolled back: the key is
// kept, the answer stored as any 4xx.
func (e *Engine) unexecuted(r *http.Request, q *request, h hold, status int) bool {
	if !q.applied.notExecuted.Load() || status < 400 || status >= 500 {
		return false
	}
	if _, durable := h.(durableTxHold); durable {
		e.log.WarnContext(r.Context(), "handler said the request did not execute, but this operation's handler was seen writing around its transaction; the answer is stored and the key kept",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "status", status)
		return false
	}
	return true
}

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

// txNotTaken reacts to a transactional handler that answered a success
// without taking its transaction: its writes went around it, so a crash
// could free the key for a retry that repeats them. From then on the
// operation's claims are committed before the handler runs
// (serveDurableTx). An error answered before the handler reached its
// transaction (a strict server refusing a body it cannot decode) says
// nothing about the wiring, and a client must not be able to switch the
// operation with one; CheckRoutes finds a handler mounted without its
// adapter before any request does.
func (e *Engine) txNotTaken(r *http.Request, q *request) {
	if q.op.txUnused.CompareAndSwap(false, true) {
		e.log.ErrorContext(r.Context(), "transactional handler did not take its transaction; this operation's claims now commit before the handler runs and fail closed. "+
			"Mount the handler with its generated adapter (or idem.TxHandler) and write through the transaction it is given",
			"operation", q.op.OperationID)
	}
}

// outcome records o unless the request already has one (a keyless run is
// OutcomeNoKey whatever its status).
func (e *Engine) outcome(q *request, o Outcome) {
	if q.event.Outcome == "" {
		q.event.Outcome = o
	}
}

func executedOutcome(res idemstore.Result) Outcome {
	if res.TookOver {
		return OutcomeTakeover
	}
	return OutcomeExecuted
}

// runUnprotected runs a request that carries no key on an operation whose
// key is optional. A transactional handler still gets its transaction; if
// it was seen writing around it, only when it asks for it (lazyTx).
func (e *Engine) runUnprotected(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if !q.op.Transactional {
		q.event.Status = e.runCounting(w, e.mark(r, q), next)
		return
	}
	if q.op.txUnused.Load() {
		e.run(w, r, q, keylessDurableHold{txHold{e.lazyTx(r, q)}}, idemstore.Result{Won: true}, next)
		return
	}
	ctx, cancel := e.storeContext(r)
	tx, err := e.tx.Begin(ctx, q.op.Lease)
	cancel()
	if err != nil {
		e.storeUnavailable(w, r, q, "begin", err)
		return
	}
	e.run(w, r, q, txHold{tx}, idemstore.Result{Won: true}, next)
}

// runCounting runs next and reports the status it sent.
func (e *Engine) runCounting(w http.ResponseWriter, r *http.Request, next http.Handler) int {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == 0 {
		return http.StatusOK
	}
	return sw.status
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
