package idem

import (
	crand "crypto/rand"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// latency is an operation's observed handler latency: a moving mean that
// weighs each new run by 1/8, so that it follows a database that slows
// down within a few requests without jumping at one slow run.
type latency struct{ nanos atomic.Int64 }

func (l *latency) observe(d time.Duration) {
	for {
		old := l.nanos.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if l.nanos.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

func (l *latency) mean() time.Duration { return time.Duration(l.nanos.Load()) }

// inFlightRetryAfter is the Retry-After, in whole seconds, of a 409
// request-in-progress for a key whose lease has remaining left (docs/semantics.md
// §3.5): about as long as the operation's handler takes (at least 1 s),
// plus a jitter of up to as much again, so that the retries of one key,
// and of keys that met a slow moment together, do not come back in
// lockstep; never beyond what is left of the lease, never below 1. A fast
// handler gets the short hint of 1 or 2 s.
func (e *Engine) inFlightRetryAfter(op *operation, remaining time.Duration) int {
	ceil := max(1, int(math.Ceil(remaining.Seconds())))
	base := min(max(1, int(math.Ceil(op.latency.mean().Seconds()))), ceil)
	return min(base+e.jitter(base+1), ceil)
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
