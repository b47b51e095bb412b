//go:build !linux

package tcpproxy

import "time"

// waiter waits until a point in time with Go's timers.
type waiter struct{}

func newWaiter() *waiter { return &waiter{} }

// until returns at t or soon after.
func (w *waiter) until(t time.Time) { time.Sleep(time.Until(t)) }

func (w *waiter) close() {}
