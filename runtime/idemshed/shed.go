// Package idemshed sheds load in front of an API: it bounds the requests
// served at once and answers a request beyond the bound at once with 503
// and Retry-After, instead of letting it queue behind work whose clients
// may have given up by the time it is done.
//
// Under a retry storm, queueing is what turns a slow moment into an
// outage: clients time out while their requests wait, retry, and the
// server spends its capacity on answers nobody reads. The Shedder keeps
// that work out:
//
//   - at most MaxInFlight requests run at once; idle keep-alive
//     connections hold none of that capacity, only a request does;
//   - a request beyond the bound waits at most MaxWait in a queue of at
//     most MaxQueue, then is refused;
//   - while the queue has not been empty for longer than MaxWait, it is
//     congested: a newcomer waits at most CongestedWait, and a freed slot
//     goes to the newest waiter (adaptive LIFO, as Facebook's "Fail at
//     Scale" describes), whose client is the most likely to still be
//     there;
//   - with Config.Key, the oldest retries come first: the Shedder
//     remembers when it first refused each request (its tenant, method,
//     path and idempotency key), and a freed slot goes to the waiting
//     retry refused first, before any first attempt. When the queue is
//     full, a retry refused before the youngest waiter arrived takes that
//     waiter's place, and the youngest is refused instead: shedding
//     refuses new work before old retries, so that the client that has
//     waited longest is not the one refused again and again;
//   - no client buys that priority: a request is dated by its first
//     refusal for lack of capacity (Full, Waited, Displaced), not its
//     first sighting nor a hang-up of its own client (Gone), which an
//     idle Shedder would grant at will, forgotten once an attempt of it is
//     served and at most KeyMemory after that refusal, and a copy of a
//     request being served is no retry. The memory is bounded (MaxKeys),
//     a full one keeps the requests refused first, and with
//     Config.Tenant one tenant holds at most its share (MaxTenantKeys),
//     so a flood of fresh keys makes no other retry a first attempt; and
//     of the copies of one request waiting at once, one only is a retry,
//     so that they displace one waiter at most;
//   - a request whose client has hung up (its context is done) is never
//     started, whether it came so or gave up while it waited.
//
// A request's body is read before the request waits for a slot, within
// BodyTimeout: a client that sends its body a byte at a time holds a
// goroutine and a connection, never a slot that others need. The bodies
// read ahead hold at most ReadAheadBytes together, beside SmallBodyBytes
// for each: a body that finds no room left is refused at once, so that
// clients who withhold the end of large bodies hold a bounded amount of
// memory, and small requests are read ahead and served all the while.
//
// The refusal is a 503 problem with Retry-After, in whole seconds: the
// time the queue is expected to take to drain (the mean time a request
// holds its slot, for each round of MaxInFlight requests ahead), jittered
// up to twice as long, rounded down and at most RetryAfter. A Shedder
// whose queue drains in milliseconds answers "Retry-After: 0": come back
// at once. RFC 9110 allows it; a client with a backoff of its own retries
// after that backoff (idemclient waits its jittered backoff, never less),
// one without retries at once. Only a saturated Shedder asks for seconds.
//
// The refusal is never stored. Put the Shedder in front
// of the idempotency engine: a refused request
// claims no key, so the client's retry under the same key is a first try.
// Behind the Shedder, the engine's idem.Config.DuplicateWait lets a copy of a
// request in flight wait for its answer while holding its slot; its
// idem.Config.DuplicateWaiters (one by default) bounds how many copies of one
// key do so, and the others are answered 409 at once.
package idemshed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/internal/movingmean"
	"github.com/idemgen/idemgen/runtime/problem"
)

// Config configures a Shedder.
type Config struct {
	// MaxInFlight is the number of requests served at once (at least 1).
	MaxInFlight int
	// MaxQueue is the number of requests that may wait for a slot; 0 lets
	// none wait: a request beyond MaxInFlight is refused at once.
	MaxQueue int
	// MaxWait is the longest a request waits for a slot while the queue
	// is not congested; zero is DefaultMaxWait.
	MaxWait time.Duration
	// CongestedWait is the longest a request waits for a slot while the
	// queue is congested (it has not been empty for MaxWait); zero is
	// DefaultCongestedWait. It is at most MaxWait.
	CongestedWait time.Duration
	// RetryAfter is the longest Retry-After hint of a refusal, in whole
	// seconds; the hint follows the time the queue takes to drain and is
	// 0 while it drains in under a second. Zero is DefaultRetryAfter.
	RetryAfter time.Duration
	// ProblemBase prefixes the refusal's problem type name
	// (problem.Overloaded); empty is problem.DefaultBase.
	ProblemBase string
	// BodyTimeout bounds the time a request's body may take to arrive.
	// The body is read before the request takes a slot, so that clients
	// that send it slowly hold no capacity: a request whose body has not
	// arrived within the bound is answered 400 and never served. Zero is
	// DefaultBodyTimeout; a negative bound reads no body ahead.
	BodyTimeout time.Duration
	// MaxBodyBytes is how much of a body is read ahead; the bytes past it
	// are left for the handler to read or refuse (the engine answers 413
	// past its own Config.MaxRequestBytes). Zero is DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReadAheadBytes bounds the bytes of the bodies read ahead at once, by
	// all requests together, from the moment they are read to the end of
	// their requests. A body of at most SmallBodyBytes is read outside the
	// bound; one that would take the bound past it is refused at once
	// with 503 and Retry-After (Reason ReadAheadFull) and its connection
	// closed. Zero is (MaxInFlight+MaxQueue)*MaxBodyBytes: as many large
	// bodies as requests served and waiting.
	ReadAheadBytes int64
	// Key reads a request's idempotency key, cheaply (HeaderKey reads a
	// header); "" is a request without one. With it, the Shedder serves
	// first the retries of the requests it has refused longest, and
	// refuses first attempts before them. A retry is a request with the
	// tenant, method, path and key of one the Shedder refused and has not
	// served since. Nil orders requests by arrival alone. It runs on every
	// request, before any slot is taken, and must not block.
	Key func(*http.Request) string
	// Tenant returns the tenant, or the authenticated client, of a
	// request, as idem.Config.Tenant does (it may be the same function):
	// with Key, each tenant's refused requests are remembered apart, at
	// most MaxTenantKeys of them, so that one tenant's keys crowd out no
	// other's. A request whose tenant is unknown counts as keyless. Nil
	// counts every request as one tenant's; put the Shedder after
	// authentication to have one.
	Tenant func(*http.Request) (string, bool)
	// MaxKeys bounds the refused requests remembered; zero is
	// DefaultMaxKeys. A full memory remembers no more until some are
	// served or forgotten: those refused first keep their places.
	MaxKeys int
	// MaxTenantKeys bounds the refused requests remembered for one
	// tenant. Zero is MaxKeys/DefaultTenantShare with Tenant set, MaxKeys
	// without.
	MaxTenantKeys int
	// KeyMemory is how long a refused request is remembered: its retries
	// count as retries for this long after its first refusal, then as
	// first attempts again; zero is DefaultKeyMemory. It bounds the age a
	// client can claim. Make it longer than the clients' retries of one
	// request last.
	KeyMemory time.Duration
	// Rand draws the jitter of Retry-After from [0, n); nil uses
	// math/rand/v2's N. Tests pass a fixed one.
	Rand func(n int64) int64
}

// Defaults of Config.
const (
	DefaultMaxWait       = 100 * time.Millisecond
	DefaultCongestedWait = 5 * time.Millisecond
	DefaultRetryAfter    = 2 * time.Second
	DefaultMaxKeys       = 1 << 16
	DefaultKeyMemory     = time.Minute
	DefaultBodyTimeout   = 10 * time.Second
	DefaultMaxBodyBytes  = 1 << 20
	// DefaultTenantShare is the share of MaxKeys one tenant may hold:
	// MaxTenantKeys is MaxKeys divided by it.
	DefaultTenantShare = 16
)

// SmallBodyBytes is the size of a body read ahead outside
// Config.ReadAheadBytes: no more than the buffers net/http keeps for each
// connection, so that small requests are read ahead whatever large ones
// hold.
const SmallBodyBytes = 4 << 10

// Reason says why a request was not served.
type Reason int

// The reasons a request is refused.
const (
	// Full: every slot and every queue place was taken.
	Full Reason = iota
	// Waited: the request waited its bound for a slot.
	Waited
	// Gone: the request's client hung up before it started.
	Gone
	// SlowBody: the request's body did not arrive within BodyTimeout.
	SlowBody
	// Displaced: the request waited in a full queue and gave its place
	// to a retry refused before it.
	Displaced
	// ReadAheadFull: the request's body is larger than SmallBodyBytes and
	// the bodies read ahead already hold Config.ReadAheadBytes.
	ReadAheadFull
	nReasons
)

func (r Reason) String() string {
	switch r {
	case Full:
		return "full"
	case Waited:
		return "waited"
	case Gone:
		return "gone"
	case SlowBody:
		return "slow-body"
	case Displaced:
		return "displaced"
	case ReadAheadFull:
		return "read-ahead-full"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Stats counts what a Shedder did since it was made.
type Stats struct {
	// Admitted counts the requests that were served.
	Admitted int64
	// Queued counts the admitted and refused requests that waited for a
	// slot.
	Queued int64
	// Refused counts the requests not served, by reason.
	Refused [nReasons]int64
}

// Shedder bounds the requests served at once. It is safe for concurrent
// use; make one with New.
type Shedder struct {
	cfg  Config
	rand func(int64) int64
	// refusals remembers the refused requests; nil without Config.Key.
	refusals *refusals
	// bodies is what is left of Config.ReadAheadBytes.
	bodies budget
	// service is the mean time a request holds its slot.
	service movingmean.Duration
	// now reads the clock that says whether the queue is congested; tests
	// replace it.
	now func() time.Time

	mu       sync.Mutex
	inFlight int
	queue    []*waiter // oldest first
	// emptyAt is when the queue was last empty; the queue is congested
	// when it has not been since MaxWait.
	emptyAt time.Time

	admitted, queued atomic.Int64
	refused          [nReasons]atomic.Int64
}

// waiter is a request waiting for a slot. granted is set, under the
// Shedder's lock, when a slot is handed to it, displaced when its place is
// given to an older retry; ready then receives.
type waiter struct {
	ready     chan struct{}
	granted   bool
	displaced bool
	// since is when the waiter's request was first refused, or when it
	// arrived; retry says it was refused before. keyed says it has a key
	// and a tenant, id and tenant name it in Shedder.refusals.
	since  time.Time
	retry  bool
	keyed  bool
	id     uint64
	tenant string
}

// New checks cfg and returns its Shedder.
func New(cfg Config) (*Shedder, error) {
	if cfg.MaxInFlight < 1 {
		return nil, errors.New("idemshed: MaxInFlight must be at least 1")
	}
	if cfg.MaxQueue < 0 || cfg.MaxWait < 0 || cfg.CongestedWait < 0 || cfg.RetryAfter < 0 || cfg.ReadAheadBytes < 0 || cfg.MaxTenantKeys < 0 {
		return nil, errors.New("idemshed: MaxQueue, MaxWait, CongestedWait, RetryAfter, ReadAheadBytes and MaxTenantKeys must not be negative")
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.CongestedWait == 0 {
		cfg.CongestedWait = min(DefaultCongestedWait, cfg.MaxWait)
	}
	if cfg.CongestedWait > cfg.MaxWait {
		return nil, fmt.Errorf("idemshed: CongestedWait %v is longer than MaxWait %v", cfg.CongestedWait, cfg.MaxWait)
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.ProblemBase == "" {
		cfg.ProblemBase = problem.DefaultBase
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ReadAheadBytes == 0 {
		cfg.ReadAheadBytes = timesAtMost(int64(cfg.MaxInFlight)+int64(cfg.MaxQueue), cfg.MaxBodyBytes)
	}
	cfg = keyDefaults(cfg)
	s := &Shedder{cfg: cfg, rand: cfg.Rand, now: time.Now}
	s.bodies.left.Store(cfg.ReadAheadBytes)
	s.emptyAt = s.now()
	if cfg.Key != nil {
		s.refusals = newRefusals(cfg.MaxKeys, cfg.MaxTenantKeys, cfg.KeyMemory, s.emptyAt)
	}
	if s.rand == nil {
		s.rand = rand.N[int64]
	}
	return s, nil
}

// keyDefaults fills in cfg's zero MaxKeys, MaxTenantKeys and KeyMemory.
func keyDefaults(cfg Config) Config {
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxTenantKeys == 0 {
		cfg.MaxTenantKeys = cfg.MaxKeys
		if cfg.Tenant != nil {
			cfg.MaxTenantKeys = max(cfg.MaxKeys/DefaultTenantShare, 1)
		}
	}
	if cfg.KeyMemory <= 0 {
		cfg.KeyMemory = DefaultKeyMemory
	}
	return cfg
}

// Stats returns the counts so far.
func (s *Shedder) Stats() Stats {
	st := Stats{Admitted: s.admitted.Load(), Queued: s.queued.Load()}
	for i := range st.Refused {
		st.Refused[i] = s.refused[i].Load()
	}
	return st
}

// Middleware serves a request through next when a slot is free or frees
// up within the wait bound, and refuses it with 503 otherwise.
func (s *Shedder) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		unread, ok := s.readAhead(w, r)
		defer unread()
		if !ok {
			return
		}
		q := s.newWaiter(r)
		if why, ok := s.acquire(r.Context(), q); !ok {
			s.remember(q, why)
			s.refuse(w)
			return
		}
		began := time.Now()
		defer func() { s.service.Observe(time.Since(began)); s.release() }()
		if r.Context().Err() != nil {
			// The client left while the slot was handed over: no refusal
			// for lack of capacity, so its request is not remembered.
			s.refused[Gone].Add(1)
			s.refuse(w)
			return
		}
		defer s.forget(q)()
		s.admitted.Add(1)
		next.ServeHTTP(w, r)
	})
}

// acquire takes a slot for w, waiting for one within the bound, and
// counts and returns why it could not.
func (s *Shedder) acquire(ctx context.Context, w *waiter) (Reason, bool) {
	if ctx.Err() != nil {
		s.refused[Gone].Add(1)
		return Gone, false
	}
	s.mu.Lock()
	if s.inFlight < s.cfg.MaxInFlight && len(s.queue) == 0 {
		s.inFlight++
		s.mu.Unlock()
		return 0, true
	}
	s.oneRetry(w)
	if len(s.queue) >= s.cfg.MaxQueue && !s.displace(w) {
		s.mu.Unlock()
		s.refused[Full].Add(1)
		return Full, false
	}
	bound := s.cfg.MaxWait
	if s.congested(s.now()) {
		bound = s.cfg.CongestedWait
	}
	s.queue = append(s.queue, w)
	s.mu.Unlock()
	s.queued.Add(1)

	timer := time.NewTimer(bound)
	defer timer.Stop()
	why := Waited
	select {
	case <-w.ready:
		if w.displaced {
			s.refused[Displaced].Add(1)
			return Displaced, false
		}
		return 0, true
	case <-timer.C:
	case <-ctx.Done():
		why = Gone
	}
	s.mu.Lock()
	switch {
	case w.granted:
		// The slot came as the wait ended: it is handed on.
		s.mu.Unlock()
		s.release()
	case w.displaced:
		// Refused as the wait ended: counted as its wait's end.
		s.mu.Unlock()
	default:
		s.remove(w)
		s.mu.Unlock()
	}
	s.refused[why].Add(1)
	return why, false
}

// congested reports whether the queue has not been empty for MaxWait.
// Called with s.mu held.
func (s *Shedder) congested(now time.Time) bool {
	return len(s.queue) > 0 && now.Sub(s.emptyAt) > s.cfg.MaxWait
}

// release frees a slot: it goes to a waiter if one is queued (next), else
// back to the pool.
func (s *Shedder) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.inFlight--
		return
	}
	i := s.next()
	w := s.queue[i]
	s.queue = append(s.queue[:i], s.queue[i+1:]...)
	s.emptied()
	w.granted = true
	w.ready <- struct{}{}
}

// remove takes w out of the queue. Called with s.mu held.
func (s *Shedder) remove(w *waiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	s.emptied()
}

// emptied notes when the queue has just become empty. Called with s.mu
// held.
func (s *Shedder) emptied() {
	if len(s.queue) == 0 {
		s.emptyAt = s.now()
	}
}

// refuse answers 503 with a Retry-After that follows the drain time;
// nothing was done.
func (s *Shedder) refuse(w http.ResponseWriter) {
	s.mu.Lock()
	queued := len(s.queue)
	s.mu.Unlock()
	w.Header().Set("Retry-After", strconv.FormatInt(s.retryAfter(queued), 10))
	s.writeProblem(w, problem.AtCapacity)
}

// writeProblem answers a.
func (s *Shedder) writeProblem(w http.ResponseWriter, a problem.Answer) {
	body, err := json.Marshal(details{Type: s.cfg.ProblemBase + a.Name(), Title: a.Title(), Status: a.Status(), Detail: a.Detail()})
	if err != nil {
		// A problem holds only strings and an int; Marshal cannot fail.
		panic(err)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	// The connection is kept: a refusal is cheap, and closing it would
	// cost the client a new handshake on its retry.
	w.WriteHeader(a.Status())
	_, _ = w.Write(body)
}

// details is an RFC 9457 problem details object.
type details struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}
