package sqlitestore

import (
	"context"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Bounds of the turn's memory of keys whose claims waited (turn.seen): a
// key is forgotten once its claim is decided, or after keyMemory, and at
// most maxSeen keys are remembered. A full memory is swept for forgotten
// keys at most once every sweepEvery: clients that hang up while their
// claims wait, each under a key of its own, can fill it, and a sweep on
// every claim would then cost every claim a walk of the whole map.
const (
	keyMemory  = 2 * time.Minute
	maxSeen    = 4096
	sweepEvery = keyMemory / 16
)

// turn admits one of this process's writers at a time (Store.writers). A
// freed turn goes to a waiting completion, release or abandonment first,
// oldest first: its handler has answered, or will not run. Then it goes
// to the claim whose key has waited longest: a retry keeps the place of
// its key's first claim that waited, as long as the key is remembered.
// Under a retry storm a claim often waits past its client's patience
// (idemstore.WithWait ends it); served in arrival order, the retries of
// one key could each lose their place that way, over and over, while
// newer keys went first.
// The zero turn is free.
type turn struct {
	mu     sync.Mutex
	held   bool
	writes []*turnWaiter // oldest first
	claims []*turnWaiter
	// seen holds when each undecided key's claims first waited.
	seen map[idemstore.Identity]time.Time
	// swept is when seen was last swept, and sweeps how many times it was.
	swept  time.Time
	sweeps int
}

// turnWaiter is one writer waiting for the turn. granted is set, under the
// turn's lock, when the turn is handed to it; ready then receives.
type turnWaiter struct {
	since   time.Time
	claim   bool
	ready   chan struct{}
	granted bool
}

// take waits at most wait for the turn and returns the function that
// passes the turn on. A claim gives its key (id), another write nil. It
// reports errLockBusy when the turn did not come, and ctx's error when
// ctx ended first.
func (t *turn) take(ctx context.Context, wait time.Duration, id *idemstore.Identity) (func(), error) {
	t.mu.Lock()
	if !t.held {
		t.held = true
		t.mu.Unlock()
		return t.give, nil
	}
	w := &turnWaiter{since: time.Now(), claim: id != nil, ready: make(chan struct{}, 1)}
	if w.claim {
		w.since = t.firstWait(*id, w.since)
		t.claims = append(t.claims, w)
	} else {
		t.writes = append(t.writes, w)
	}
	t.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return t.give, nil
	case <-timer.C:
		err = errLockBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.mu.Lock()
	granted := w.granted
	if !granted {
		t.remove(w)
	}
	t.mu.Unlock()
	if granted {
		// The turn came as the wait ended: it is passed on.
		t.give()
	}
	return nil, err
}

// firstWait is when id's claims first waited, now if none did that is
// remembered. Called with t.mu held.
func (t *turn) firstWait(id idemstore.Identity, now time.Time) time.Time {
	if since, ok := t.seen[id]; ok && now.Sub(since) < keyMemory {
		return since
	}
	if t.seen == nil {
		t.seen = make(map[idemstore.Identity]time.Time)
	}
	if len(t.seen) >= maxSeen && now.Sub(t.swept) >= sweepEvery {
		t.swept, t.sweeps = now, t.sweeps+1
		for k, since := range t.seen {
			if now.Sub(since) >= keyMemory {
				delete(t.seen, k)
			}
		}
	}
	if len(t.seen) >= maxSeen {
		return now
	}
	t.seen[id] = now
	return now
}

// decided forgets id: its claim has been won or lost.
func (t *turn) decided(id idemstore.Identity) {
	t.mu.Lock()
	delete(t.seen, id)
	t.mu.Unlock()
}

// give passes the turn to the next waiter (see turn), or frees it.
func (t *turn) give() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w *turnWaiter
	switch {
	case len(t.writes) > 0:
		w = t.writes[0]
	case len(t.claims) > 0:
		w = t.claims[0]
		for _, c := range t.claims[1:] {
			if c.since.Before(w.since) {
				w = c
			}
		}
	default:
		t.held = false
		return
	}
	t.remove(w)
	w.granted = true
	w.ready <- struct{}{}
}

// remove takes w out of its queue. Called with t.mu held.
func (t *turn) remove(w *turnWaiter) {
	q := &t.writes
	if w.claim {
		q = &t.claims
	}
	for i, x := range *q {
		if x == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return
		}
	}
}
