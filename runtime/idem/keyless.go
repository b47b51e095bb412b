package idem

import (
	"context"
	"net/http"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
)

// runUnprotected runs a request that carries no key on an operation whose
// key is optional. A transactional handler still gets its transaction; if
// it was seen writing around it, only when it asks for it (lazyTx).
func (e *Engine) runUnprotected(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if !q.op.Transactional {
		q.event.Status = e.runCounting(w, e.mark(r, q), next)
		return
	}
	if q.op.txUnused.Load() {
		e.run(w, r, q, keylessDurableHold{txHold{e.lazyTx(r, q)}}, noClaim, next)
		return
	}
	ctx, cancel := e.storeContext(r)
	tx, err := e.tx.Begin(ctx, q.op.Lease)
	cancel()
	if err != nil {
		e.storeUnavailable(w, r, q, "begin", err)
		return
	}
	e.run(w, r, q, txHold{tx}, noClaim, next)
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

// noKey answers a request without a key: a 400 when the policy requires
// one, otherwise the handler runs with no idempotency.
func (e *Engine) noKey(w http.ResponseWriter, r *http.Request, q *request, next http.Handler) {
	if q.op.Required {
		e.reject(w, q, e.answer(problem.KeyRequired, keyPlace(q.op.Key)))
		return
	}
	q.event.Outcome = OutcomeNoKey
	e.runUnprotected(w, r, q, next)
}

func keyPlace(k KeySource) string {
	switch k.In {
	case key.InBody:
		return "the body field " + k.Name
	case key.InQuery:
		return "the query parameter " + k.Name
	default:
		return "the " + k.Name + " header"
	}
}

// keylessDurableHold is the transaction of a keyless request to an
// operation whose handler writes around its transaction (durable mode,
// docs/semantics.md §9):
// when it cannot commit, the writes made around it may stand, so the
// outcome is unknown rather than "not processed".
type keylessDurableHold struct{ txHold }

func (h keylessDurableHold) complete(ctx context.Context, resp idemstore.Response) error {
	if err := h.txHold.complete(ctx, resp); err != nil {
		return writesMayStand("the handler's transaction did not commit", err, nil)
	}
	return nil
}
