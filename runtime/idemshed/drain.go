package idemshed

import (
	"sync/atomic"
	"time"
)

// serviceTime is the observed time a request holds its slot: a moving
// mean that weighs each new request by 1/8, so that it follows a handler
// that slows down within a few requests without jumping at one slow one.
type serviceTime struct{ nanos atomic.Int64 }

func (m *serviceTime) observe(d time.Duration) {
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

func (m *serviceTime) mean() time.Duration { return time.Duration(m.nanos.Load()) }

// retryAfter is the Retry-After of a refusal, in whole seconds: the time
// the requests ahead of a retry take to drain (the mean service time for
// each round of MaxInFlight requests, the queue and the retry itself),
// jittered up to twice as long so that the clients refused together do
// not come back together, rounded down, and at most RetryAfter. A queue
// that drains in under a second gets 0: come back at once, after the
// client's own backoff.
func (s *Shedder) retryAfter(queued int) int64 {
	rounds := int64(queued/s.cfg.MaxInFlight + 1)
	d := int64(s.service.mean()) * rounds
	d += s.rand(d + 1)
	return min(d/int64(time.Second), int64(s.cfg.RetryAfter/time.Second))
}
