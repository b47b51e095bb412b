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
	e.gone(w, q, r.Context().Err())
	return true
}

// gone sends the answer to a client that hung up, for the reason err, and
// records the request as OutcomeClientGone. It is never stored. A claim the
// store stopped waiting for because its client hung up (ErrWaitEnded) is
// answered so too: the store wrote nothing, so nothing is released (a
// release would wait for the same lock again), and the key is free for the
// client's retry at once (docs/semantics.md §7.3).
func (e *Engine) gone(w http.ResponseWriter, q *request, err error) {
	q.event.Outcome, q.event.Err = OutcomeClientGone, err
	p := e.answer(problem.ClientLeft)
	p.RetryAfter = 1
	e.send(w, q, p)
}
