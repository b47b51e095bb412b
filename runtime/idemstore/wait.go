package idemstore

import (
	"context"
	"errors"
)

// ErrWaitEnded reports that a store call stopped waiting (for a lock, its
// turn to write, a pooled connection) because the context that bounds its
// waiting ended (WithWait). The store wrote nothing, so there is nothing to
// release: a Release would only wait again.
var ErrWaitEnded = errors.New("idemstore: the store stopped waiting before it wrote anything")

// waitKey is the context key under which WithWait keeps the wait context.
type waitKey struct{}

// WithWait returns a copy of ctx that carries wait, the wait context
// (docs/semantics.md §9) that bounds how long a store call made under ctx
// may wait before it writes. ctx keeps
// bounding the call itself, the write included. The engine passes a
// request's own context as wait, under a store context that ignores the
// client's hang-up (docs/semantics.md §7.3): a client that leaves stops
// its claim from waiting, and never cuts a write off half-way.
func WithWait(ctx, wait context.Context) context.Context {
	return context.WithValue(ctx, waitKey{}, wait)
}

// WaitContext returns the context a store waits under, for a call made
// under ctx: it is done when ctx is, and when the wait context carried by
// ctx (WithWait) is, with ErrWaitEnded as its cause (context.Cause, or
// WaitEnded). Without a wait context it is ctx itself. stop releases it.
func WaitContext(ctx context.Context) (wctx context.Context, stop func()) {
	wait, ok := ctx.Value(waitKey{}).(context.Context)
	if !ok || wait == nil {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	if wait.Err() != nil {
		cancel(ErrWaitEnded)
		return wctx, func() {}
	}
	unhook := context.AfterFunc(wait, func() { cancel(ErrWaitEnded) })
	return wctx, func() {
		unhook()
		cancel(context.Canceled)
	}
}

// WaitEnded reports whether wctx, from WaitContext, ended because its wait
// context did; a store then returns an error wrapping ErrWaitEnded.
func WaitEnded(wctx context.Context) bool {
	return errors.Is(context.Cause(wctx), ErrWaitEnded)
}
