// Package inuse holds what a router adapter's middleware is serving, so
// that it can refuse a request the router serves with a context another
// request's handler still runs with. echo and gin reuse a request's
// context once their chain returns; middleware in front of the adapter's
// that returns while the chain runs (a timeout) lets them hand it to the
// next request while the first request's handler still holds it, and
// that handler's writes through it would land in the next request's
// answer (docs/semantics.md §3.4).
package inuse

import "sync"

// Set is a set of the keys being served. Its zero value is empty.
type Set[K comparable] struct {
	mu sync.Mutex
	m  map[K]struct{}
}

// Enter adds k, and reports whether it was not in the set: false means
// that another request is being served with k.
func (s *Set[K]) Enter(k K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.m[k]; held {
		return false
	}
	if s.m == nil {
		s.m = make(map[K]struct{})
	}
	s.m[k] = struct{}{}
	return true
}

// Leave removes k.
func (s *Set[K]) Leave(k K) {
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}
