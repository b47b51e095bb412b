package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/http"
	"strconv"
	"time"
)

// keyLabel is how a key appears in logs: a short hash unless the operator
// asked for the keys themselves. Keys can carry customer identifiers.
func (e *Engine) keyLabel(k string) string {
	if e.logKeys {
		return k
	}
	s := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(s[:6])
}

func (e *Engine) reject(w http.ResponseWriter, q *request, p Problem) {
	q.event.Outcome, q.event.Status = OutcomeRejected, p.Status
	p.Write(w)
}

// answerExisting answers a request that lost its claim (SEMANTICS §3.5).
func (e *Engine) answerExisting(w http.ResponseWriter, q *request, c Claim, rec Record) {
	if !bytes.Equal(rec.Fingerprint, c.Fingerprint) || rec.Operation != c.Operation {
		detail := "This idempotency key was already used for a different request. Use a new key for a new request."
		if rec.Operation != c.Operation {
			detail = "This idempotency key was already used for another operation. Use a new key for a new request."
		}
		q.event.Outcome = OutcomeMismatch
		e.send(w, q, e.problem(ProblemKeyReused, http.StatusUnprocessableEntity, "Idempotency key reused", detail))
		return
	}
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
		e.replay(w, q, rec.Response)
	case StateInFlight:
		q.event.Outcome = OutcomeInFlight
		p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
			"A request with this idempotency key is still being processed. Retry after the Retry-After delay with the same key.")
		p.RetryAfter = retryAfter(rec.LeaseRemaining)
		e.send(w, q, p)
	default:
		q.event.Outcome = OutcomeIndeterminate
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

func (e *Engine) fenced(w http.ResponseWriter, q *request, rec *recorder, err error) {
	q.event.Outcome, q.event.Err = OutcomeFenced, err
	e.log.Warn("idempotency claim was taken over while the handler ran; its response is discarded",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key))
	if rec.streaming {
		q.event.Status = rec.statusCode()
		return
	}
	p := e.problem(ProblemInProgress, http.StatusConflict, "Request in progress",
		"Another attempt with this idempotency key took over. Retry with the same key to get its result.")
	p.RetryAfter = 1
	e.send(w, q, p)
}

func (e *Engine) storeUnavailable(w http.ResponseWriter, q *request, step string, err error) {
	q.event.Outcome, q.event.Err = OutcomeStoreError, err
	e.log.Error("idempotency store failed; the handler was not run or its writes were rolled back",
		"operation", q.op.OperationID, "key", e.keyLabel(q.key), "step", step, "err", err)
	p := e.problem(ProblemStoreUnavailable, http.StatusServiceUnavailable, "Idempotency store unavailable",
		"The server could not record the idempotency key, so it did not process the request. Retry later with the same key.")
	p.RetryAfter = storeUnavailableRetryAfter
	e.send(w, q, p)
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
