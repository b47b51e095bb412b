package idem

import (
	"fmt"
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// run runs the handler under a won claim and ends the claim by the
// response's class. The response is held back until it is stored, so a
// client never sees an answer that its retry would not see too; only a
// non-transactional body that outgrows the snapshot limit streams on.
func (e *Engine) run(w http.ResponseWriter, r *http.Request, q *request, h hold, how origin, next http.Handler) {
	defer e.held.hold(e.dupWait > 0, q.id)()
	r = e.mark(r, q)
	limit := q.op.MaxSnapshotBytes
	if tx := h.tx(); tx != nil {
		// Not a byte may leave before the commit.
		limit = -1
		q.applied.tx = tx
	}
	if how == tookOver {
		q.event.State = idemstore.StateInFlight
	}
	if e.goneBeforeRun(w, r, q, h) {
		return
	}
	rec := newRecorder(q, w, limit)
	began := time.Now()
	panicked := e.runHandler(rec, r, next)
	rec.end() // a handler still holding rec writes nowhere from now on
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
	e.endStored(w, r, q, h, rec, how)
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

// noAnswer ends a request whose handler returned without writing a status
// or a byte: nobody gave an answer, so none is stored. The claim is
// abandoned as after a panic (the handler may have done part of its work).
func (e *Engine) noAnswer(w http.ResponseWriter, r *http.Request, q *request, storeErr error) {
	q.event.Outcome, q.event.Status = OutcomeNoAnswer, http.StatusInternalServerError
	e.log.WarnContext(r.Context(), "handler returned without an answer; its idempotency claim was abandoned",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "client_gone", r.Context().Err() != nil, "store_err", storeErr)
	e.answer(problem.HandlerSilent).Write(w)
}

func (e *Engine) handlerPanicked(w http.ResponseWriter, r *http.Request, q *request, rec *recorder, v any, storeErr error) {
	q.event.Outcome, q.event.Err = OutcomePanicked, fmt.Errorf("handler panicked: %v", v)
	e.log.ErrorContext(r.Context(), "handler panicked; its idempotency claim was abandoned",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "panic", v, "store_err", storeErr)
	if v == http.ErrAbortHandler {
		panic(v)
	}
	q.event.Status = http.StatusInternalServerError
	if rec.streaming {
		// Part of the answer is on the wire; the connection cannot carry
		// a clean error any more.
		panic(http.ErrAbortHandler)
	}
	e.answer(problem.HandlerPanicked).Write(w)
}

// goneBeforeRun releases a won claim whose client hung up before the
// handler started: the handler never ran, so the key is free for the
// client's retry (docs/semantics.md §7), and the request is answered as gone.
func (e *Engine) goneBeforeRun(w http.ResponseWriter, r *http.Request, q *request, h hold) bool {
	if r.Context().Err() == nil {
		return false
	}
	if err := e.endClaim(r, q, h.release); err != nil && !e.endedWithConnection(r.Context(), q, err) {
		e.log.WarnContext(r.Context(), "idempotency claim of a request whose client left was not released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
	}
	return e.clientGone(w, r, q)
}

// origin is how a request came to run its handler: under the claim it won,
// free or taken over, or, keyless (keyless.go), under no claim at all.
type origin int

const (
	// wonFree: the request's claim found its key free.
	wonFree origin = iota
	// tookOver: the request's claim took over one whose lease had ended
	// (docs/semantics.md §3.5).
	tookOver
	// noClaim: the request carries no key; its hold is its transaction
	// alone.
	noClaim
)

// originOf is how a request that won its claim with res runs.
func originOf(res idemstore.Result) origin {
	if res.TookOver {
		return tookOver
	}
	return wonFree
}

// outcome is the outcome of a request of this origin and whose answer
// was stored.
func (o origin) outcome() Outcome {
	switch o {
	case tookOver:
		return OutcomeTakeover
	case noClaim:
		return OutcomeNoKey
	}
	return OutcomeExecuted
}

// storable reports whether a response of this status is stored and replayed
// (docs/semantics.md §3.4): statuses that describe a passing condition are not, so
// that a retry runs the handler again.
func (e *Engine) storable(op *operation, status int) bool {
	return idemstore.Storable(status, op.CacheServerErrors)
}
