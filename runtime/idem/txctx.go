package idem

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// ErrNoTx is wrapped by TxFor's error when a request's context holds no
// transaction of the type asked for.
var ErrNoTx = errors.New("idem: no idempotency transaction")

// errTxNotBegun marks a transaction that could not begin when the handler
// asked for it (lazyTx): the store failed, not the server's wiring.
var errTxNotBegun = errors.New("its transaction could not begin")

// TxFor returns the transaction of a request of the transactional
// operation operationID, as the store's driver type Tx (pgx.Tx for
// pgstore, *sqlitestore.Tx for sqlitestore). It serves handlers that get only the
// request's context, such as oapi-codegen strict-server methods, where
// TxHandler cannot stand in front.
//
// The error wraps ErrNoTx and says why: the engine is not mounted in front
// of the handler, the handler's framework gave it a context that hides the
// request's values (gin without ContextWithFallback), the operation is not
// transactional, or the store's transaction is another type. The handler must then write nothing and
// fail the request; running on without the transaction would write
// outside the key's commit.
func TxFor[Tx any](ctx context.Context, operationID string) (Tx, error) {
	var zero Tx
	a := appliedFrom(ctx)
	if a != nil && a.op.OperationID != operationID {
		return zero, fmt.Errorf("%w for operation %s: the engine protected this request as operation %s", ErrNoTx, operationID, a.op.OperationID)
	}
	if tx, ok := TxFrom[Tx](ctx); ok {
		return tx, nil
	}
	want := reflect.TypeFor[Tx]().String()
	if a != nil && a.tx != nil {
		if err := beginErr(a.tx); err != nil {
			return zero, fmt.Errorf("%w for operation %s: %w: %w", ErrNoTx, operationID, errTxNotBegun, err)
		}
		return zero, fmt.Errorf("%w of type %s for operation %s: the store's transaction is a %T", ErrNoTx, want, operationID, a.tx.Driver())
	}
	if a != nil {
		return zero, fmt.Errorf("%w for operation %s: the engine protects it without a transaction; its policy must be transactional (x-idempotency transactional: true) and its store a Transactor", ErrNoTx, operationID)
	}
	return zero, fmt.Errorf("%w for operation %s: %w", ErrNoTx, operationID, errNoEngineInContext)
}

// errNoEngineInContext explains a context that carries nothing the engine
// put in the request's: the two ways a request that did pass through the
// engine loses it, and the one where it did not.
var errNoEngineInContext = errors.New("the context carries none of the values the engine put in the request's context: " +
	"either the idempotency engine is not mounted in front of this handler, or the framework hands the handler a context of its own " +
	"that does not pass the request's values on (gin's *gin.Context does only with engine.ContextWithFallback = true; " +
	"or pass c.Request.Context())")
