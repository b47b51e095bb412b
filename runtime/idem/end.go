package idem

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

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
	if err != nil && !e.endedWithConnection(r.Context(), q, err) {
		e.log.WarnContext(r.Context(), "idempotency claim not released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
	}
	e.outcome(q, OutcomeReleased)
	rec.send()
}

// endStored completes the claim with the snapshot of the answer (sealed
// when a Sealer is configured) and sends the answer once it is stored, or
// says why it cannot be.
func (e *Engine) endStored(w http.ResponseWriter, r *http.Request, q *request, h hold, rec *recorder, how origin) {
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
		e.outcome(q, how.outcome())
		rec.send()
	}
}

// snapshot builds what is stored: the status, the headers the policy keeps
// and the body, or no body when it outgrew the policy's limit.
func (e *Engine) snapshot(op *operation, rec *recorder) idemstore.Response {
	resp := idemstore.Response{Status: rec.statusCode(), Header: make(http.Header)}
	for name, v := range rec.header {
		// A kept header is kept whatever the spelling of its map key
		// (w.Header()["ETag"], Go's way to keep that spelling, or a name
		// in lower case), and written as a trailer (http.TrailerPrefix)
		// too. It is stored under the name the handler wrote, so that the
		// replay sends what the first answer sent (docs/semantics.md §7.5).
		if op.replay[http.CanonicalHeaderKey(strings.TrimPrefix(name, http.TrailerPrefix))] {
			resp.Header[name] = append([]string(nil), v...)
		}
	}
	if rec.overflowed || int64(rec.body.Len()) > op.MaxSnapshotBytes {
		resp.Omitted = true
		return resp
	}
	resp.Body = rec.body.Bytes()
	return resp
}

// seal is what the store keeps of resp for q's key: resp sealed when a
// Sealer is configured, resp itself otherwise, its body escaped if it
// begins as a sealed one does (idemstore.SealResponse).
func (e *Engine) seal(q *request, resp idemstore.Response) (idemstore.Response, error) {
	if q.key == "" {
		// A keyless request stores nothing: a Sealer that fails must not
		// refuse, after its handler ran, an answer nobody keeps.
		return resp, nil
	}
	return idemstore.SealResponse(e.sealer, q.id, resp)
}
