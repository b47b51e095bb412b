package idemshed

import (
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The package documentation: "no client buys that priority ... a copy of a
// request being served is no retry". A request's place ahead of first
// attempts belongs to the request, not to each copy of it: yet a client
// refused once under a key, which then sends copies of that request at
// once while none of them has been served yet, has every copy dated by
// that one refusal. Each copy that finds the queue full takes the place
// of an honest first attempt, so that one refusal displaces as many other
// clients' requests as the queue holds.
func TestCopiesOfOneRefusedRequestDisplaceOneWaiterAtMost(t *testing.T) {
	const queue = 3
	s, move := keyed(t, queue)
	refusedAgo(t, s, "x", move, 30*time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "a", "a") })
	<-b.entered
	honest := make([]*httptest.ResponseRecorder, queue)
	for i := range queue {
		wg.Go(func() { honest[i] = serveKey(h, "h"+strconv.Itoa(i), "h"+strconv.Itoa(i)) })
		waitQueued(t, s, i+1)
	}
	for i := range queue {
		wg.Go(func() { serveKey(h, "copy"+strconv.Itoa(i), "x") })
		for j := 0; j < 5000 && s.Stats().Refused[Displaced] < int64(i+1); j++ {
			time.Sleep(time.Millisecond)
		}
	}
	waitQueued(t, s, queue)
	close(b.release)
	wg.Wait()
	if d := s.Stats().Refused[Displaced]; d > 1 {
		var refused int
		for _, r := range honest {
			if r.Code == 503 {
				refused++
			}
		}
		t.Errorf("copies of one request refused once displaced %d waiters (%d of %d honest first attempts refused); want one place at most for one request", d, refused, queue)
	}
}
