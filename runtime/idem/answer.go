package idem

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

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
	// A 204 or a 304 has no body and declares none; one stored with a
	// body (before the recorder refused it) is replayed without it. A
	// kept trailer is replayed as one, which over HTTP/1.1 takes a chunked
	// body: net/http frames it, as it did the first answer.
	body := bodyAllowed(resp.Status)
	if body && !hasTrailer(resp.Header) {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	w.WriteHeader(resp.Status)
	if body {
		_, _ = w.Write(resp.Body)
	}
	q.event.Outcome, q.event.Status = OutcomeReplayed, resp.Status
}

// hasTrailer reports whether h holds a trailer written with
// http.TrailerPrefix.
func hasTrailer(h http.Header) bool {
	for name := range h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response of status may have a body, as
// net/http decides it (RFC 9110 §15.2, §15.3.5, §15.4.5): 1xx, 204 and
// 304 may not.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// open is the replayable response of the row c met. Without a Sealer it
// still refuses a sealed body, so that a replica configured without one
// never sends ciphertext as an answer, and takes the escape off a body
// stored unsealed that begins as a sealed one does.
func (e *Engine) open(q *request, c idemstore.Claim, stored *idemstore.Response) (*idemstore.Response, error) {
	resp, err := idemstore.OpenResponse(e.sealer, c.Identity, *stored)
	if err != nil {
		return nil, err
	}
	if e.sealer == nil && len(resp.Body) == len(stored.Body) {
		// Nothing was taken off: the row's response replays as it is.
		return stored, nil
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
