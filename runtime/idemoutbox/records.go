package idemoutbox

import "sync"

// Records holds the effects whose deliveries the runners of this process
// are recording. The runners of a Store that shares one among them (a
// dialect's outbox does, through a method Records() *Records) pass over
// an effect they claim while another of them is still recording its
// delivery: however long that record waits for the database, the effect
// is not handed to its receiver a second time from this process. The
// zero Records holds nothing.
type Records struct {
	mu  sync.Mutex
	ids map[int64]int
}

// recordsOf is a Store that shares its Records among its runners.
type recordsOf interface {
	Records() *Records
}

// hold counts id as being recorded until the returned function is
// called.
func (r *Records) hold(id int64) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = make(map[int64]int)
	}
	r.ids[id]++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ids[id]--; r.ids[id] == 0 {
			delete(r.ids, id)
		}
	}
}

// recording reports whether a delivery of id is being recorded.
func (r *Records) recording(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id] > 0
}
