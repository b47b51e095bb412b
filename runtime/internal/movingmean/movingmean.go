// Package movingmean keeps a duration's moving mean, safe for concurrent
// use: the engine's observed handler latency and the shedder's service
// time, from which each derives its Retry-After.
package movingmean

import (
	"sync/atomic"
	"time"
)

// Duration is a moving mean that weighs each new observation by 1/8, so
// that it follows a handler that slows down within a few runs without
// jumping at one slow run. The zero value has seen nothing and reads 0.
type Duration struct{ nanos atomic.Int64 }

// Observe adds d to the mean.
func (m *Duration) Observe(d time.Duration) {
	for {
		old := m.nanos.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if m.nanos.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// Mean is the mean so far, 0 before the first observation.
func (m *Duration) Mean() time.Duration { return time.Duration(m.nanos.Load()) }
