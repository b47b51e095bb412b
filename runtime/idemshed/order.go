package idemshed

import "net/http"

// newWaiter is r's place in the queue, should it need one: with
// Config.Key, dated by when its key was first seen.
func (s *Shedder) newWaiter(r *http.Request) *waiter {
	w := &waiter{ready: make(chan struct{}, 1), since: s.now()}
	if s.seen == nil {
		return w
	}
	if k := s.cfg.Key(r); k != "" {
		w.since, w.retry = s.seen.see(k, w.since)
	}
	return w
}

// next is the index of the waiter a freed slot goes to: the retry whose
// key was seen first, else, among first attempts, the newest while the
// queue is congested and the oldest otherwise. Called with s.mu held and
// the queue not empty.
func (s *Shedder) next() int {
	best := -1
	for i, w := range s.queue {
		if w.retry && (best < 0 || w.since.Before(s.queue[best].since)) {
			best = i
		}
	}
	switch {
	case best >= 0:
		return best
	case s.congested(s.now()):
		return len(s.queue) - 1
	}
	return 0
}

// displace makes room in a full queue for w when w is a retry of a key
// seen before that of the youngest waiter: that waiter is refused, and
// reports whether room was made. Called with s.mu held.
func (s *Shedder) displace(w *waiter) bool {
	if !w.retry || len(s.queue) == 0 {
		return false
	}
	y := 0
	for i, q := range s.queue {
		if q.since.After(s.queue[y].since) {
			y = i
		}
	}
	v := s.queue[y]
	if !w.since.Before(v.since) {
		return false
	}
	s.queue = append(s.queue[:y], s.queue[y+1:]...)
	v.displaced = true
	v.ready <- struct{}{}
	return true
}
