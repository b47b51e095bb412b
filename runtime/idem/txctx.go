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
// of the handler, the operation is not transactional, or the store's
// transaction is another type. The handler must then write nothing and
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
	return zero, fmt.Errorf("%w for operation %s: it must run behind the idempotency engine, with a transactional policy and store", ErrNoTx, operationID)
}
