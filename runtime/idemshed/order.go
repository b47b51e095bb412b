package idemshed

import "net/http"

// newWaiter is r's place in the queue, should it need one: with
// Config.Key, dated by its request's first refused attempt.
func (s *Shedder) newWaiter(r *http.Request) *waiter {
	w := &waiter{ready: make(chan struct{}, 1), since: s.now()}
	if s.refusals == nil {
		return w
	}
	k := s.cfg.Key(r)
	tenant, ok := s.tenant(r)
	if k == "" || !ok {
		return w
	}
	w.keyed, w.tenant = true, tenant
	w.id = s.refusals.id(attempt{tenant: tenant, method: r.Method, path: r.URL.Path, key: k})
	w.since, w.retry = s.refusals.look(w.id, w.since)
	return w
}

// tenant is r's tenant as Config.Tenant reads it; without one, every
// request is the one tenant's.
func (s *Shedder) tenant(r *http.Request) (string, bool) {
	if s.cfg.Tenant == nil {
		return "", true
	}
	return s.cfg.Tenant(r)
}

// remember remembers w's request as refused, dated by w's arrival unless it
// was refused before, when it was refused for lack of capacity (why is
// Full, Waited or Displaced). A request whose client hung up was refused
// by its client, not by the Shedder: a client that hangs up at will on an
// idle Shedder would otherwise date its request as it pleases.
func (s *Shedder) remember(w *waiter, why Reason) {
	switch why {
	case Full, Waited, Displaced:
		if w.keyed {
			s.refusals.refused(w.id, w.tenant, w.since, s.now())
		}
	}
}

// forget forgets w's request, whose attempt is served, and returns what
// ends its serving.
func (s *Shedder) forget(w *waiter) (done func()) {
	if !w.keyed {
		return func() {}
	}
	return s.refusals.admitted(w.id)
}

// next is the index of the waiter a freed slot goes to: the retry refused
// first, else, among first attempts, the newest while the
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

// displace makes room in a full queue for w when w is a retry refused
// before the youngest waiter arrived: that waiter is refused, and reports
// whether room was made. Called with s.mu held.
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

// oneRetry makes w a first attempt, dated now, when a copy of its request
// already waits as a retry: a request's place ahead of first attempts is
// the request's, not each copy's, so that copies of a request refused once
// neither go first one after another nor displace a waiter each. Called
// with s.mu held.
func (s *Shedder) oneRetry(w *waiter) {
	if !w.retry {
		return
	}
	for _, q := range s.queue {
		if q.retry && q.id == w.id {
			w.retry, w.since = false, s.now()
			return
		}
	}
}
