package idem

import (
	"net/http"

	"github.com/idemgen/idemgen/runtime/problem"
)

// clientGone answers a request whose client has hung up (its context is
// done) before its claim or before its handler, and reports whether it
// did. Work for a client that is gone is work no one reads: under a retry
// storm it is what pushes the clients still waiting past their deadlines.
// The answer goes nowhere; it is a 503 so that nothing in between mistakes
// it for a result, and it is never stored.
func (e *Engine) clientGone(w http.ResponseWriter, r *http.Request, q *request) bool {
	if r.Context().Err() == nil {
		return false
	}
	q.event.Outcome, q.event.Err = OutcomeClientGone, r.Context().Err()
	p := e.answer(problem.ClientLeft)
	p.RetryAfter = 1
	e.send(w, q, p)
	return true
}

// goneBeforeRun releases a won claim whose client hung up before the
// handler started: the handler never ran, so the key is free for the
// client's retry (docs/semantics.md §7), and the request is answered as gone.
func (e *Engine) goneBeforeRun(w http.ResponseWriter, r *http.Request, q *request, h hold) bool {
	if r.Context().Err() == nil {
		return false
	}
	if err := e.endClaim(r, q, h.release); err != nil {
		e.log.WarnContext(r.Context(), "idempotency claim of a request whose client left was not released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
	}
	return e.clientGone(w, r, q)
}
