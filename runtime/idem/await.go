package idem

import (
	"net/http"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// serveKeyed claims the request's key and serves it; a request that met
// its key in flight and may wait for the answer (Config.DuplicateWait)
// waits, holding no store connection, and claims again: it then meets the
// answer and replays it, or finds the key free (the first request's answer
// was not stored) and runs as a retry would, or, past the bound, is
// answered 409.
//
// At most Config.DuplicateWaiters requests wait for one key at once; the
// ones past it are answered 409 at once, so that copies of one request
// hold no more of the capacity in front of the engine than that.
func (e *Engine) serveKeyed(w http.ResponseWriter, r *http.Request, q *request, c idemstore.Claim, next http.Handler) {
	joined := false
	defer func() {
		if joined {
			e.waiters.leave(q.id)
		}
	}()
	for {
		if q.op.Transactional {
			e.serveTx(w, r, q, c, next)
		} else {
			e.serveClaim(w, r, q, c, next)
		}
		rec := q.metInFlight
		if rec == nil {
			return
		}
		q.metInFlight = nil
		joined = joined || e.waiters.join(q.id)
		if !joined || !e.await(r, q) {
			e.stillRunning(w, q, *rec)
			return
		}
	}
}

// awaits reports whether a request that met its key in flight with rec
// waits for the answer instead of being answered 409; the answer is then
// serveKeyed's to give.
func (e *Engine) awaits(q *request, rec idemstore.Record) bool {
	if e.dupWait <= 0 || time.Since(q.start) >= e.dupWait {
		return false
	}
	q.metInFlight = &rec
	return true
}

// await waits until the key's holder in this process ends its claim, or
// until it is time to look again for one held elsewhere, within the
// request's bound. It reports false when the bound has passed or the
// client has gone.
func (e *Engine) await(r *http.Request, q *request) bool {
	left := time.Until(q.start.Add(e.dupWait))
	if left <= 0 {
		return false
	}
	ended := e.held.ended(q.id)
	wait := left
	if ended == nil {
		wait = min(left, min(max(q.op.latency.Mean()/4, 10*time.Millisecond), 250*time.Millisecond))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
		return wait < left
	case <-r.Context().Done():
		return false
	}
}

// heldKeys are the keys whose claims this process holds while their
// handlers run, so that the requests waiting for their answers
// (Config.DuplicateWait) are woken when each ends. The zero value is
// ready.
type heldKeys struct {
	mu sync.Mutex
	m  map[idemstore.Identity]chan struct{}
}

// hold notes that id's claim is held, when on is set, and returns what
// notes its end.
func (h *heldKeys) hold(on bool, id idemstore.Identity) func() {
	if !on {
		return func() {}
	}
	done := make(chan struct{})
	h.mu.Lock()
	if h.m == nil {
		h.m = map[idemstore.Identity]chan struct{}{}
	}
	// A claim taken over from this process replaces the one before.
	h.m[id] = done
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		if h.m[id] == done {
			delete(h.m, id)
		}
		h.mu.Unlock()
		close(done)
	}
}

// ended is closed when the claim this process holds on id ends; nil when
// it holds none.
func (h *heldKeys) ended(id idemstore.Identity) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id]
}

// waiters counts the requests waiting for each key's answer
// (Config.DuplicateWait), at most max of them.
type waiters struct {
	max int
	mu  sync.Mutex
	n   map[idemstore.Identity]int
}

// join counts one more request waiting for id, unless max already do.
func (ws *waiters) join(id idemstore.Identity) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n[id] >= ws.max {
		return false
	}
	if ws.n == nil {
		ws.n = map[idemstore.Identity]int{}
	}
	ws.n[id]++
	return true
}

// leave counts one request fewer waiting for id.
func (ws *waiters) leave(id idemstore.Identity) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.n[id]--; ws.n[id] <= 0 {
		delete(ws.n, id)
	}
}
