package sqlitestore

import (
	"container/heap"
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

// turn admits one of this process's writers at a time (Store.writers;
// docs/semantics.md §9 defines the word). A
// freed turn goes to a waiting completion, release or abandonment first,
// oldest first: its handler has answered, or will not run. Then it goes
// to the claim whose key has waited longest: a retry keeps the place of
// its key's first claim that waited, as long as the key is remembered.
// Under a retry storm a claim often waits past its client's patience
// (idemstore.WithWait ends it); served in arrival order, the retries of
// one key could each lose their place that way, over and over, while
// newer keys went first. Last it goes to a background writer, a
// transaction of BeginTurn that is no request's (an outbox's runner),
// oldest first; but one passed over for passedOver goes ahead of the
// claims. Ahead of them always, a runner working through a backlog kept
// the turn from the claims for seconds, and they failed; behind them
// with no bound, a storm of claims would keep a runner's record waiting
// for as long as the storm lasted.
// The zero turn is free.
type turn struct {
	mu   sync.Mutex
	held bool
	// writes, claims and background are the waiters, claims by the time
	// their keys first waited and the others in arrival order. Each is a heap, so that a
	// waiter joins, is handed the turn, or leaves when its wait ends in
	// time logarithmic in how many wait: under a storm thousands of claims
	// wait, and each give and each timeout runs under mu.
	writes     waitQueue
	claims     waitQueue
	background waitQueue
	// arrivals numbers the waiters in their order of arrival.
	arrivals uint64
	// seen holds when each undecided key's claims first waited.
	seen map[idemstore.Identity]time.Time
	// swept is when seen was last swept, and sweeps how many times it was.
	swept  time.Time
	sweeps int
}

// turnWaiter is one writer waiting for the turn. granted is set, under the
// turn's lock, when the turn is handed to it; ready then receives.
type turnWaiter struct {
	since time.Time
	// arrival orders waiters of one since by their arrival.
	arrival uint64
	// index is the waiter's place in its queue's heap, -1 once out of it.
	index int
	claim bool
	// background marks a writer that is no request's (takeBackground).
	background bool
	ready      chan struct{}
	granted    bool
}

// passedOver is the longest a background writer waits behind claims
// that came after it: past it, it goes ahead of them.
const passedOver = 100 * time.Millisecond

// take waits at most wait for the turn and returns the function that
// passes the turn on. A claim gives its key (id), another write nil. It
// reports errLockBusy when the turn did not come, and ctx's error when
// ctx ended first.
func (t *turn) take(ctx context.Context, wait time.Duration, id *idemstore.Identity) (func(), error) {
	return t.await(ctx, wait, &turnWaiter{claim: id != nil}, id)
}

// takeBackground waits for the turn as a background writer (see turn)
// until ctx ends, and returns the function that passes the turn on.
func (t *turn) takeBackground(ctx context.Context) (func(), error) {
	return t.await(ctx, untilCtx, &turnWaiter{background: true}, nil)
}

// await is take for the waiter w, a claim's of id or another's.
func (t *turn) await(ctx context.Context, wait time.Duration, w *turnWaiter, id *idemstore.Identity) (func(), error) {
	t.mu.Lock()
	if !t.held {
		t.held = true
		t.mu.Unlock()
		return t.give, nil
	}
	w.since, w.ready = time.Now(), make(chan struct{}, 1)
	if w.claim {
		w.since = t.firstWait(*id, w.since)
	}
	t.enqueue(w)
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

// enqueue adds w to its queue. Called with t.mu held.
func (t *turn) enqueue(w *turnWaiter) {
	t.arrivals++
	w.arrival = t.arrivals
	heap.Push(t.queue(w), w)
}

// queue is w's queue.
func (t *turn) queue(w *turnWaiter) *waitQueue {
	switch {
	case w.claim:
		return &t.claims
	case w.background:
		return &t.background
	}
	return &t.writes
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
	var q *waitQueue
	switch {
	case t.writes.Len() > 0:
		q = &t.writes
	case t.background.Len() > 0 && time.Since(t.background.items[0].since) >= passedOver:
		q = &t.background
	case t.claims.Len() > 0:
		q = &t.claims
	case t.background.Len() > 0:
		q = &t.background
	default:
		t.held = false
		return
	}
	w := heap.Pop(q).(*turnWaiter)
	w.granted = true
	w.ready <- struct{}{}
}

// remove takes w out of its queue. Called with t.mu held.
func (t *turn) remove(w *turnWaiter) {
	if w.index >= 0 {
		heap.Remove(t.queue(w), w.index)
	}
}

// waitQueue is a heap (container/heap) of waiters: of writes, the
// earliest to arrive first; of claims, the earliest since first and, among
// equals, the earliest to arrive.
type waitQueue struct {
	items []*turnWaiter
	// less orders two waiters (earlier when nil). Tests count the
	// comparisons with it.
	less func(a, b *turnWaiter) bool
}

// earlier reports whether a goes before b.
func earlier(a, b *turnWaiter) bool {
	if a.claim && !a.since.Equal(b.since) {
		return a.since.Before(b.since)
	}
	return a.arrival < b.arrival
}

// Len implements heap.Interface.
func (q *waitQueue) Len() int { return len(q.items) }

// Less implements heap.Interface.
func (q *waitQueue) Less(i, j int) bool {
	if q.less != nil {
		return q.less(q.items[i], q.items[j])
	}
	return earlier(q.items[i], q.items[j])
}

// Swap implements heap.Interface.
func (q *waitQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index, q.items[j].index = i, j
}

// Push implements heap.Interface.
func (q *waitQueue) Push(x any) {
	w := x.(*turnWaiter)
	w.index = len(q.items)
	q.items = append(q.items, w)
}

// Pop implements heap.Interface.
func (q *waitQueue) Pop() any {
	n := len(q.items) - 1
	w := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	w.index = -1
	return w
}
