package idemshed

import "time"

// retryAfter is the Retry-After of a refusal, in whole seconds: the time
// the requests ahead of a retry take to drain (the mean service time for
// each round of MaxInFlight requests, the queue and the retry itself),
// jittered up to twice as long so that the clients refused together do
// not come back together, rounded down, and at most RetryAfter. A queue
// that drains in under a second gets 0: come back at once, after the
// client's own backoff.
func (s *Shedder) retryAfter(queued int) int64 {
	rounds := int64(queued/s.cfg.MaxInFlight + 1)
	d := int64(s.service.Mean()) * rounds
	d += s.rand(d + 1)
	return min(d/int64(time.Second), int64(s.cfg.RetryAfter/time.Second))
}
