package idemshed

import (
	"hash/maphash"
	"net/http"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// HeaderKey is a Config.Key that reads the idempotency key from the
// header name, as the generated policies name it (idem.KeySource.Name of
// a policy whose key is in a header, "Idempotency-Key" by default). It
// reads the key as the engine does (key.Parse: a quoted key and the same
// key unquoted are one), and a value the engine would refuse as it
// stands.
func HeaderKey(name string) func(*http.Request) string {
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if k, err := key.Parse(v, key.MaxLength); err == nil {
			return k
		}
		return v
	}
}

// attempt names what a retry repeats: the tenant, the method, the path and
// the idempotency key. A key sent with another method or path, or by
// another tenant, is another request's.
type attempt struct {
	tenant, method, path, key string
}

// refusals remembers when the requests admission refused were first
// refused, so that their retries come first, in bounded memory.
//
// A request is remembered only once it is refused for lack of capacity
// (Shedder.remember), dated by its first refused attempt, and forgotten once an attempt is admitted: a request
// served ages no more. Its age is at most span: one refused longer ago is
// forgotten and dated anew, so that no client holds an old date by being
// refused now and then. Each tenant holds at most perTenant entries, and a
// full memory takes no new ones: the requests refused longest keep their
// places, and one tenant's flood of keys crowds out neither other
// tenants' nor older ones. A request whose attempt is being served counts
// as no retry: its copies wait for nothing.
//
// Entries are kept in two generations, the older dropped every span; a
// request met again is carried into the newer. They are hashes: a long key
// costs no more than a short one, and a collision only shares a date.
type refusals struct {
	seed      maphash.Seed
	max       int
	perTenant int
	span      time.Duration

	mu       sync.Mutex
	cur, old generation
	rotated  time.Time
	// serving counts the admitted attempts of each request.
	serving map[uint64]int
}

// generation is one generation of refusals: each request's first refusal
// and tenant, and how many entries each tenant holds.
type generation struct {
	at      map[uint64]refusal
	tenants map[string]int
}

// refusal is a remembered request: when it was first refused, by whom.
type refusal struct {
	since  time.Time
	tenant string
}

func newGeneration() generation {
	return generation{at: map[uint64]refusal{}, tenants: map[string]int{}}
}

func newRefusals(max, perTenant int, span time.Duration, now time.Time) *refusals {
	return &refusals{seed: maphash.MakeSeed(), max: max, perTenant: perTenant, span: span,
		cur: newGeneration(), old: newGeneration(), rotated: now, serving: map[uint64]int{}}
}

// id is a's hash.
func (f *refusals) id(a attempt) uint64 {
	return maphash.Comparable(f.seed, a)
}

// look returns when the request id was first refused, and whether it was:
// a request not refused before, refused longer than span ago, or being
// served is no retry, and is dated now.
func (f *refusals) look(id uint64, now time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rotate(now)
	e, ok := f.carry(id)
	switch {
	case !ok || f.serving[id] > 0:
		return now, false
	case now.Sub(e.since) > f.span:
		f.cur.drop(id)
		return now, false
	}
	return e.since, true
}

// refused remembers that the request id of tenant, first refused at since,
// was refused, if it is not being served and there is room for it.
func (f *refusals) refused(id uint64, tenant string, since, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rotate(now)
	if _, ok := f.carry(id); ok || f.serving[id] > 0 {
		return
	}
	if len(f.cur.at)+len(f.old.at) >= f.max || f.cur.tenants[tenant]+f.old.tenants[tenant] >= f.perTenant {
		return
	}
	f.cur.add(id, refusal{since: since, tenant: tenant})
}

// admitted forgets the request id, whose attempt is served, and counts it
// as being served until done is called.
func (f *refusals) admitted(id uint64) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur.drop(id)
	f.old.drop(id)
	f.serving[id]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.serving[id]--; f.serving[id] == 0 {
			delete(f.serving, id)
		}
	}
}

// carry returns id's entry, moved into the newer generation. Called with
// f.mu held.
func (f *refusals) carry(id uint64) (refusal, bool) {
	if e, ok := f.cur.at[id]; ok {
		return e, true
	}
	e, ok := f.old.at[id]
	if ok {
		f.old.drop(id)
		f.cur.add(id, e)
	}
	return e, ok
}

// rotate drops the older generation once the newer is span old. Called
// with f.mu held.
func (f *refusals) rotate(now time.Time) {
	if now.Sub(f.rotated) < f.span {
		return
	}
	f.old, f.cur = f.cur, newGeneration()
	f.rotated = now
}

// len is the number of requests remembered.
func (f *refusals) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cur.at) + len(f.old.at)
}

func (g generation) add(id uint64, e refusal) {
	g.at[id] = e
	g.tenants[e.tenant]++
}

func (g generation) drop(id uint64) {
	e, ok := g.at[id]
	if !ok {
		return
	}
	delete(g.at, id)
	if g.tenants[e.tenant]--; g.tenants[e.tenant] == 0 {
		delete(g.tenants, e.tenant)
	}
}
