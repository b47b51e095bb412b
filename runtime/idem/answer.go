package idem

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// reject answers a request refused before any claim (admission, or a
// route the engine cannot apply its policy to).
func (e *Engine) reject(w http.ResponseWriter, q *request, p Problem) {
	q.event.Outcome, q.event.Status = OutcomeRejected, p.Status
	p.Write(w)
}

// send answers with p, a problem met after admission.
func (e *Engine) send(w http.ResponseWriter, q *request, p Problem) {
	q.event.Status = p.Status
	p.Write(w)
}

// answerExisting answers a request that lost its claim (docs/semantics.md §3.5).
func (e *Engine) answerExisting(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, rec idemstore.Record) {
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) || rec.Operation != c.Operation {
		reused := problem.KeyReusedRequest
		if rec.Operation != c.Operation {
			reused = problem.KeyReusedOperation
		}
		q.event.Outcome = OutcomeMismatch
		e.send(w, q, e.answer(reused))
		return
	}
	q.event.State = rec.State
	switch rec.State {
	case idemstore.StateCompleted:
		if rec.Response == nil || rec.Response.Omitted {
			status := 0
			if rec.Response != nil {
				status = rec.Response.Status
			}
			q.event.Outcome = OutcomeNotReplayable
			e.send(w, q, e.answer(problem.ResponseTooLarge, status))
			return
		}
		resp, err := e.open(q, c, rec.Response)
		if err != nil {
			e.unreadable(w, r, q, err)
			return
		}
		e.replay(w, q, resp)
	case idemstore.StateInFlight:
		if !e.awaits(q, rec) {
			e.stillRunning(w, q, rec)
		}
	default:
		q.event.Outcome = OutcomeIndeterminate
		// The store does not say whether this claim marked the key or met
		// it marked, so every meeting is logged: the first one is the
		// transition, later ones show clients still waiting on an operator.
		e.log.WarnContext(r.Context(), "idempotency key is indeterminate (outcome unknown); answered 409 until an operator resolves it with idemgen keys",
			"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key))
		e.send(w, q, e.answer(problem.Interrupted))
	}
}

func (e *Engine) replay(w http.ResponseWriter, q *request, resp *idemstore.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set(problem.ReplayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
	q.event.Outcome, q.event.Status = OutcomeReplayed, resp.Status
}

// open is the replayable response of the row c met. Without a Sealer it
// still refuses a sealed body, so that a replica configured without one
// never sends ciphertext as an answer.
func (e *Engine) open(q *request, c idemstore.Claim, stored *idemstore.Response) (*idemstore.Response, error) {
	if e.sealer == nil && !idemstore.IsSealed(*stored) {
		return stored, nil
	}
	resp, err := idemstore.OpenResponse(e.sealer, c.Identity, *stored)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// unreadable answers a retry whose stored response cannot be opened: a
// row changed in the store, moved from another key, or sealed under a key
// the Sealer lacks. Replaying it would send an answer nobody gave, so the
// engine fails closed and says so at ERROR.
func (e *Engine) unreadable(w http.ResponseWriter, r *http.Request, q *request, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.ErrorContext(r.Context(), "the stored response of an idempotency key cannot be opened; nothing was replayed",
		"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key), "err", err)
	e.send(w, q, e.answer(problem.ResponseNotReadable))
}

func (e *Engine) fenced(w http.ResponseWriter, r *http.Request, q *request, rec *recorder, err error) {
	q.event.Outcome, q.event.Err = OutcomeFenced, err
	e.log.WarnContext(r.Context(), "idempotency claim was taken over while the handler ran; its response is discarded",
		"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key))
	if rec.streaming {
		q.event.Status = rec.statusCode()
		return
	}
	p := e.answer(problem.TakenOver)
	p.RetryAfter = 1
	e.send(w, q, p)
}

// outcomeUnknown answers a transactional request whose writes may or may
// not be durable (its handler ended the transaction itself, or wrote
// around one that could not commit); the key is left held or
// indeterminate.
func (e *Engine) outcomeUnknown(w http.ResponseWriter, r *http.Request, q *request, err error) {
	q.event.Outcome, q.event.Err = OutcomeIndeterminate, err
	e.log.ErrorContext(r.Context(), "transactional request's writes may or may not be durable; the key's outcome is unknown",
		"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key), "err", err)
	e.send(w, q, e.answer(problem.CommitUnknown))
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

func (e *Engine) storeUnavailable(w http.ResponseWriter, r *http.Request, q *request, step string, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.ErrorContext(r.Context(), "idempotency store failed; the handler was not run or its writes were rolled back",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "step", step, "err", err)
	p := e.answer(problem.StoreFailed)
	p.RetryAfter = storeUnavailableRetryAfter
	e.send(w, q, p)
}
