package idem

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemgen/idemgen/runtime/problem"
)

// TxFrom returns the transaction of a transactional operation's request,
// as the store's driver type (pgx.Tx for pgstore, *sqlitestore.Tx for
// sqlitestore). Calling it tells the engine that the handler writes through
// the transaction.
func TxFrom[Tx any](ctx context.Context) (Tx, bool) {
	var zero Tx
	a := appliedFrom(ctx)
	if a == nil || a.tx == nil {
		return zero, false
	}
	tx, ok := a.tx.Driver().(Tx)
	if ok {
		a.taken.Store(true)
	}
	return tx, ok
}

// TxHandler adapts a handler that writes inside the idempotency transaction.
// Generated code calls it for every transactional operation. A request that
// reaches it without the transaction of operationID, as type Tx (the engine
// is not mounted in front of it, it protected the request as another
// operation, or the store's driver type differs), is refused with a 500:
// the handler never runs unprotected.
func TxHandler[Tx any](operationID string, h func(w http.ResponseWriter, r *http.Request, tx Tx)) http.Handler {
	return &txHandler[Tx]{op: operationID, h: h}
}

type txHandler[Tx any] struct {
	op string
	h  func(w http.ResponseWriter, r *http.Request, tx Tx)
}

func (t *txHandler[Tx]) operationID() string { return t.op }
func (t *txHandler[Tx]) takesTx() bool       { return true }

func (t *txHandler[Tx]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tx, err := TxFor[Tx](r.Context(), t.op)
	switch {
	case err == nil:
		t.h(w, r, tx)
	case errors.Is(err, errTxNotBegun):
		t.unavailable(w, problemBase(r))
	default:
		t.refuse(w, problemBase(r))
	}
}

// problemBase is the ProblemBase of the engine that protected r, or the
// default when none did.
func problemBase(r *http.Request) string {
	if a := appliedFrom(r.Context()); a != nil {
		return a.problemBase
	}
	return problem.DefaultBase
}

// unavailable answers a request whose transaction could not begin when
// the handler asked for it: the handler did not run, and the engine
// releases the key, so a retry runs it.
func (t *txHandler[Tx]) unavailable(w http.ResponseWriter, base string) {
	p := answerUnder(base, problem.TxNotBegun)
	p.RetryAfter = storeUnavailableRetryAfter
	p.Write(w)
}

func (t *txHandler[Tx]) refuse(w http.ResponseWriter, base string) {
	answerUnder(base, problem.TxMissing, t.op).Write(w)
}
