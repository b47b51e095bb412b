package idemshed

import (
	"hash/maphash"
	"net/http"
	"sync"
	"time"
)

// HeaderKey is a Config.Key that reads the idempotency key from the
// header name, as the generated policies name it (idem.KeySource.Name of
// a policy whose key is in a header, "Idempotency-Key" by default).
func HeaderKey(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// firstSeen remembers when each key was first seen, in bounded memory:
// two generations of at most half of max entries each, the older dropped
// when the newer is full or older than span. A key met again is carried
// into the newer generation with its first sighting, so that a key a
// client keeps retrying keeps its age; one not met for span to twice span
// is forgotten. Keys are kept as hashes: a long key costs no more than a
// short one, and a collision only shares an age.
type firstSeen struct {
	seed maphash.Seed
	max  int
	span time.Duration

	mu       sync.Mutex
	cur, old map[uint64]time.Time
	rotated  time.Time
}

func newFirstSeen(max int, span time.Duration, now time.Time) *firstSeen {
	return &firstSeen{seed: maphash.MakeSeed(), max: max, span: span,
		cur: map[uint64]time.Time{}, old: map[uint64]time.Time{}, rotated: now}
}

// see returns when key was first seen, and whether that was before now.
func (f *firstSeen) see(key string, now time.Time) (time.Time, bool) {
	h := maphash.String(f.seed, key)
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.cur[h]; ok {
		return t, true
	}
	f.rotate(now)
	if t, ok := f.old[h]; ok {
		f.cur[h] = t
		return t, true
	}
	f.cur[h] = now
	return now, false
}

// rotate drops the older generation when the newer is full or old.
// Called with f.mu held.
func (f *firstSeen) rotate(now time.Time) {
	if len(f.cur) < f.max/2 && now.Sub(f.rotated) < f.span {
		return
	}
	f.old, f.cur = f.cur, make(map[uint64]time.Time, len(f.cur))
	f.rotated = now
}

// len is the number of keys remembered.
func (f *firstSeen) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cur) + len(f.old)
}
