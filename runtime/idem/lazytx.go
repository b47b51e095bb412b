package idem

import (
	"context"
	"net/http"
	"sync"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// lazyTx is a transaction that begins only when the handler first asks for
// it (TxFrom, TxFor, TxHandler). The engine hands it to an operation whose
// handler was seen writing around its transaction (serveDurableTx, and that
// operation's keyless requests). A transaction begun up front would hold
// whatever the store's Begin takes, on SQLite the database's only write
// lock, while the handler writes on a connection of its own and so waits
// for its own request. A lazyTx that never began commits and releases
// nothing; once the engine has ended it, it never begins.
type lazyTx struct {
	begin func() (idemstore.Tx, error)

	mu    sync.Mutex
	t     idemstore.Tx // the begun transaction; nil until the handler asks
	err   error        // why begin failed
	ended bool
}

// lazyTx returns the lazy transaction of one request of q's operation. It
// begins under a store context of its own, as Begin does for a keyless
// request; a failure is logged here, since the handler is told only that
// it has no transaction.
func (e *Engine) lazyTx(r *http.Request, q *request) *lazyTx {
	return &lazyTx{begin: func() (idemstore.Tx, error) {
		ctx, cancel := e.storeContext(r)
		defer cancel()
		tx, err := e.tx.Begin(ctx, q.op.Lease)
		if err != nil {
			e.log.ErrorContext(ctx, "the transaction a handler asked for could not begin; the handler was told it has none",
				"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
		}
		return tx, err
	}}
}

// Driver implements Tx: it begins the transaction on the first call and
// returns its driver, or nil when it could not begin or the engine has
// already ended it.
func (l *lazyTx) Driver() any {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.t == nil && l.err == nil && !l.ended {
		l.t, l.err = l.begin()
	}
	if l.t == nil {
		return nil
	}
	return l.t.Driver()
}

// Commit implements Tx.
func (l *lazyTx) Commit(ctx context.Context, resp idemstore.Response) error {
	if t := l.end(); t != nil {
		return t.Commit(ctx, resp)
	}
	return nil
}

// Rollback implements Tx.
func (l *lazyTx) Rollback(ctx context.Context) error {
	if t := l.end(); t != nil {
		return t.Rollback(ctx)
	}
	return nil
}

// end keeps l from beginning from now on and returns its transaction, nil
// when it never began.
func (l *lazyTx) end() idemstore.Tx {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	return l.t
}

// beginErr reports why the request's transaction tx could not begin when
// the handler asked for it; nil when it began or was begun up front.
func beginErr(tx idemstore.Tx) error {
	l, ok := tx.(*lazyTx)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
