package idem

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// inFlightRetryAfter is the Retry-After, in whole seconds, of a 409
// request-in-progress for a key whose lease has remaining left
// (docs/semantics.md §3.5): about when the answer is likely ready, the
// operation's mean handler time (a second before any run has finished),
// jittered up to twice as long so that the retries of one key, and of keys
// that met a slow moment together, do not come back in lockstep, rounded
// down, and never beyond what is left of the lease. A handler that answers
// in under half a second gets 0: come back at once, after the client's own
// backoff; seconds are asked for only of a handler that takes them.
func (e *Engine) inFlightRetryAfter(op *operation, remaining time.Duration) int {
	mean := op.latency.Mean()
	if mean == 0 {
		mean = time.Second
	}
	ms := int(min(mean, remaining).Milliseconds())
	ms += e.jitter(ms + 1)
	return min(ms/1000, int(remaining/time.Second))
}

// stillRunning answers a request that met its key in flight with rec: 409
// request-in-progress, whose Retry-After is sent even when it is 0.
func (e *Engine) stillRunning(w http.ResponseWriter, q *request, rec idemstore.Record) {
	q.event.Outcome = OutcomeInFlight
	p := e.answer(problem.StillRunning)
	p.RetryAfter = e.inFlightRetryAfter(q.op, rec.LeaseRemaining)
	if p.RetryAfter == 0 {
		w.Header().Set(headerRetryAfter, "0")
	}
	e.send(w, q, p)
}

// lockedRand is a generator of the engine's own, so that no engine draws
// from, or disturbs, state another part of the process shares.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand() *lockedRand {
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	return &lockedRand{r: rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))}
}

// IntN draws from [0, n).
func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}
