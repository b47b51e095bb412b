package idem

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"strconv"
	"time"
)

func (e *Engine) reject(w http.ResponseWriter, q *request, p Problem) {
	q.event.Outcome, q.event.Status = OutcomeRejected, p.Status
	p.Write(w)
}

// answerExisting answers a request that lost its claim (SEMANTICS §3.5).
func (e *Engine) answerExisting(w http.ResponseWriter, r *http.Request, q *request, c Claim, rec Record) {
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) || rec.Operation != c.Operation {
		detail := "This idempotency key was already used for a different request. Use a new key for a new request."
		if rec.Operation != c.Operation {
			detail = "This idempotency key was already used for another operation. Use a new key for a new request."
		}
		q.event.Outcome = OutcomeMismatch
		e.send(w, q, e.problem(ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency key reused", detail))
		return
	}
	q.event.State = rec.State
	switch rec.State {
	case StateCompleted:
		if rec.Response == nil || rec.Response.Omitted {
			status := 0
			if rec.Response != nil {
				status = rec.Response.Status
			}
			q.event.Outcome = OutcomeNotReplayable
			e.send(w, q, e.problem(ProblemNotReplayable, http.StatusConflict, "Response not replayable",
				"The request with this key completed with status "+strconv.Itoa(status)+
					", but its response was too large to keep. Look the result up with a read request."))
			return
		}
		resp, err := e.open(q, c, rec.Response)
		if err != nil {
			e.unreadable(w, r, q, err)
			return
		}
		e.replay(w, q, resp)
	case StateInFlight:
		q.event.Outcome = OutcomeInFlight
		p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
			"A request with this idempotency key is still being processed. Retry after the Retry-After delay with the same key.")
		p.RetryAfter = retryAfter(rec.LeaseRemaining)
		e.send(w, q, p)
	default:
		q.event.Outcome = OutcomeIndeterminate
		// The store does not say whether this claim marked the key or met
		// it marked, so every meeting is logged: the first one is the
		// transition, later ones show clients still waiting on an operator.
		e.log.WarnContext(r.Context(), "idempotency key is indeterminate (outcome unknown); answered 409 until an operator resolves it with idemgen keys",
			"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key))
		e.send(w, q, e.problem(ProblemOutcomeUnknown, http.StatusConflict, "Outcome unknown",
			"A request with this idempotency key was interrupted and its outcome is unknown. Do not retry; contact support to resolve it."))
	}
}

// retryAfter is the hint sent with a 409 in progress: whole seconds, at
// least 1, at most what is left of the lease, and short (2 s at most), since
// most handlers finish well within their lease.
func retryAfter(remaining time.Duration) int {
	s := int(math.Ceil(remaining.Seconds()))
	return max(1, min(s, 2))
}

func (e *Engine) replay(w http.ResponseWriter, q *request, resp *Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set(headerIdempotentReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
	q.event.Outcome, q.event.Status = OutcomeReplayed, resp.Status
}

func (e *Engine) send(w http.ResponseWriter, q *request, p Problem) {
	q.event.Status = p.Status
	p.Write(w)
}

func (e *Engine) fenced(w http.ResponseWriter, r *http.Request, q *request, rec *recorder, err error) {
	q.event.Outcome, q.event.Err = OutcomeFenced, err
	e.log.WarnContext(r.Context(), "idempotency claim was taken over while the handler ran; its response is discarded",
		"operation", q.op.OperationID, "tenant", q.tenant, "key", e.keyLabel(q.key))
	if rec.streaming {
		q.event.Status = rec.statusCode()
		return
	}
	p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
		"Another attempt with this idempotency key took over. Retry with the same key to get its result.")
	p.RetryAfter = 1
	e.send(w, q, p)
}

func (e *Engine) storeUnavailable(w http.ResponseWriter, r *http.Request, q *request, step string, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.ErrorContext(r.Context(), "idempotency store failed; the handler was not run or its writes were rolled back",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "step", step, "err", err)
	p := e.problem(ProblemStoreUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The server could not record the idempotency key, so it did not process the request. Retry later with the same key.")
	p.RetryAfter = storeUnavailableRetryAfter
	e.send(w, q, p)
}

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
		return h.c.OnLeaseExpiry == FailClosed
	case durableTxHold:
		return h.plain.c.OnLeaseExpiry == FailClosed
	}
	return false
}

// observe reports a finished request to the Observer.
func (e *Engine) observe(ctx context.Context, q *request) {
	q.event.Duration = time.Since(q.start)
	if e.observer != nil {
		if q.key != "" {
			// Computed here, not on admission, so that an engine without
			// an observer pays for no HMAC on the fast path.
			q.event.KeyLabel = e.keyLabel(q.key)
		}
		e.observer.Observe(ctx, q.event)
	}
}

func (e *Engine) timed(q *request, f func() (Result, error)) (Result, error) {
	t := time.Now()
	res, err := f()
	q.event.StoreDuration += time.Since(t)
	return res, err
}

func (e *Engine) storeErr(q *request, f func() error) error {
	t := time.Now()
	err := f()
	q.event.StoreDuration += time.Since(t)
	return err
}
