package idemshed

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The package documentation: "no client buys that priority: a request is
// dated by its first refusal, not its first sighting". A client can have
// any request refused at will, on an idle Shedder: it sends it and hangs
// up at once, and the Shedder, which starts no request whose client has
// gone, remembers that as the request's first refusal. Such a key, sent
// again up to KeyMemory later under overload, is a retry older than every
// honest client's: it is served before them and takes their places in a
// full queue. A sighting bought by hanging up dates the request as well as
// a sighting would.
func TestHangUpOnIdleShedderBuysNoAge(t *testing.T) {
	s, move := keyed(t, 1)
	if st := s.Stats(); st.Admitted != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Idle: a slot is free, and the client hangs up before it is served.
	hungUpAgo(t, s, "minted", move, 50*time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "a", "a") })
	<-b.entered
	var honest *httptest.ResponseRecorder
	wg.Go(func() { honest = serveKey(h, "honest", "honest") })
	waitQueued(t, s, 1)
	wg.Go(func() { serveKey(h, "minted", "minted") })
	for j := 0; j < 2000 && s.Stats().Refused[Displaced] == 0; j++ {
		time.Sleep(time.Millisecond)
	}
	close(b.release)
	wg.Wait()
	if s.Stats().Refused[Displaced] != 0 {
		t.Errorf("a request whose only refusal was its own client hanging up on an idle Shedder displaced an honest first attempt (answered %d); its age was bought, not earned", honest.Code)
	}
}
