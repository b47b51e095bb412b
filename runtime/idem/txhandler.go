package idem

import (
	"context"
	"net/http"
)

// txKey carries the store's transaction to a transactional handler.
type txKey struct{}

// TxFrom returns the transaction of a transactional operation's request,
// as the store's driver type (pgx.Tx, *sql.Tx).
func TxFrom[Tx any](ctx context.Context) (Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(Tx)
	return tx, ok
}

// TxHandler adapts a handler that writes inside the idempotency transaction.
// Generated code calls it for every transactional operation. A request that
// reaches it without a transaction of type Tx (the engine is not mounted in
// front of it, or the store's driver type differs) is refused with a 500:
// the handler never runs unprotected.
func TxHandler[Tx any](operationID string, h func(w http.ResponseWriter, r *http.Request, tx Tx)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := TxFrom[Tx](r.Context())
		if !ok {
			Problem{
				Type:   defaultProblemBase + ProblemTransactionMissing,
				Title:  "Transaction unavailable",
				Status: http.StatusInternalServerError,
				Detail: "The server is misconfigured: operation " + operationID + " must run behind the idempotency engine with a transactional store. Contact support.",
			}.Write(w)
			return
		}
		h(w, r, tx)
	})
}
