package pgstore

import (
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/jackc/pgx/v5"
)

// A handler's call can still be running when the idempotency layer ends
// its transaction: a goroutine the handler left behind, or code of the
// handler's that pgx runs inside the call (a query rewriter, an argument's
// driver.Valuer, a Scanner, a COPY source). Such a call checked that the
// transaction was open before it ended, and goes on to send its statement
// on the connection, whoever holds it by then: after the connection went
// back to the pool, another request's, inside that request's transaction
// (docs/semantics.md §7.2). The end of the transaction therefore knows
// of every call that may still send, much as database/sql's Tx.closemu
// does: every call counts itself in flight before it checks that the
// transaction is open, and out when pgx is done with it (for rows and a
// batch's results, when they are closed); the end marks the transaction
// closed before it looks at the count. Unlike closemu, the end does not
// wait for a call in flight, as the handler's code it runs may never
// return. Nor does it send anything more on the connection: the call may
// send its statement at any moment, after a COMMIT too, where no check of
// the end would see it. The connection's socket is closed at once
// (cutOff), before anything is sent or logged, so that the call's
// statement, if it is ever sent, meets a closed connection; nothing of
// the transaction is committed by pgstore, and since the call may have
// ended the transaction itself, a claim's key fails closed and a keyless
// transaction's outcome is unknown, as for a handler that ended its
// transaction (docs/semantics.md §5.4, §7.2). That costs its own request,
// never another's.

// handlerCalls is what a handler's transaction and its nested ones share
// to keep their calls apart from the transaction's end.
type handlerCalls struct {
	closed   atomic.Bool
	inFlight atomic.Int64
	// refused is set when a call's statement that would have ended the
	// transaction was refused (refuseEnding): the transaction then
	// commits nothing.
	refused atomic.Bool
	// outlived is set, by the end, when a call was in flight as the
	// transaction ended: its connection must not be reused.
	outlived bool
}

// enter counts a call in flight and reports whether the transaction is
// still open; a call that entered leaves when pgx is done with it. A call
// the end did not count sees the transaction closed: the end marks it
// closed before it reads the count, and the call counts itself before it
// reads the mark.
func (c *handlerCalls) enter() bool {
	if c.closed.Load() {
		return false
	}
	c.inFlight.Add(1)
	if c.closed.Load() {
		c.inFlight.Add(-1)
		return false
	}
	return true
}

// leave counts a call out.
func (c *handlerCalls) leave() { c.inFlight.Add(-1) }

// end closes the transaction to every call that has not entered yet, and
// notes whether one is still in flight (outlived).
func (c *handlerCalls) end() {
	c.closed.Store(true)
	if c.inFlight.Load() > 0 {
		c.outlived = true
	}
}

// throughHandler makes lo, pgx's large objects of h's transaction, run
// their statements through h, so that each counts as the handler's call
// and is refused once the transaction has ended, rather than only once
// pgx's own transaction object is closed (putBack), with no count of a
// call already past that check. pgx makes a LargeObjects of its own
// transaction only, and keeps the Tx it runs through in its one field,
// which is unexported: the field is set in place, if the type is still
// that one field.
// TestALargeObjectLeftBehindRunsInTheNextTenantsTransaction holds pgx to
// it.
func throughHandler(lo *pgx.LargeObjects, h *handlerTx) {
	t := reflect.TypeFor[pgx.LargeObjects]()
	if t.NumField() != 1 || t.Field(0).Type != reflect.TypeFor[pgx.Tx]() {
		return
	}
	*(*pgx.Tx)(unsafe.Pointer(lo)) = h
}
