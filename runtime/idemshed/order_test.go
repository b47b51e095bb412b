package idemshed

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// serveKey is serve for a request carrying an Idempotency-Key.
func serveKey(h http.Handler, n, key string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/t?n="+n, nil)
	r.Header.Set("Idempotency-Key", key)
	h.ServeHTTP(rec, r)
	return rec
}

// keyed is a Shedder that reads keys, with one slot and a clock the test
// moves.
func keyed(t *testing.T, queue int) (*Shedder, func(time.Duration)) {
	s := mustNew(t, Config{MaxInFlight: 1, MaxQueue: queue, MaxWait: time.Hour, CongestedWait: time.Hour,
		Key: HeaderKey("Idempotency-Key")})
	clock := time.Now()
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	return s, func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
}

// refusedAgo has s remember a request under key as refused for lack of
// capacity (Full), then moves s's clock by age.
func refusedAgo(t *testing.T, s *Shedder, key string, move func(time.Duration), age time.Duration) {
	t.Helper()
	r := httptest.NewRequest("POST", "/t?n=first", nil)
	r.Header.Set("Idempotency-Key", key)
	s.remember(s.newWaiter(r), Full)
	move(age)
}

// hungUpAgo has s refuse a request under key whose client is gone before
// it is served, then moves s's clock by age.
func hungUpAgo(t *testing.T, s *Shedder, key string, move func(time.Duration), age time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	r := httptest.NewRequestWithContext(ctx, "POST", "/t?n=first", nil)
	r.Header.Set("Idempotency-Key", key)
	s.Middleware(newBlocking()).ServeHTTP(rec, r)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("first attempt of %s: %d, want 503", key, rec.Code)
	}
	move(age)
}

// A freed slot goes to the retry refused first, before first
// attempts that came before it and after it, congested queue or not.
func TestOldRetryServedFirst(t *testing.T) {
	for _, congested := range []bool{false, true} {
		s, move := keyed(t, 3)
		refusedAgo(t, s, "old", move, 30*time.Second)
		b := newBlocking()
		h := s.Middleware(b)
		var wg sync.WaitGroup
		wg.Go(func() { serveKey(h, "a", "a") })
		<-b.entered
		wg.Go(func() { serveKey(h, "new1", "new1") })
		waitQueued(t, s, 1)
		wg.Go(func() { serveKey(h, "retry", "old") })
		waitQueued(t, s, 2)
		wg.Go(func() { serveKey(h, "new2", "new2") })
		waitQueued(t, s, 3)
		if congested {
			move(2 * time.Hour)
		}
		b.release <- struct{}{}
		if n := <-b.entered; n != "retry" {
			t.Errorf("congested %v: the freed slot went to %s, want the retry of the oldest key", congested, n)
		}
		close(b.release)
		wg.Wait()
	}
}

// A retry refused long ago that finds the queue full takes the place of the
// youngest waiter, a first attempt, which is refused; a first attempt that
// finds it full is refused itself.
func TestFullQueueRefusesNewWorkFirst(t *testing.T) {
	s, move := keyed(t, 1)
	refusedAgo(t, s, "old", move, 30*time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serveKey(h, "a", "a") })
	<-b.entered
	var newRec *httptest.ResponseRecorder
	wg.Go(func() { newRec = serveKey(h, "new", "new") })
	waitQueued(t, s, 1)
	if rec := serveKey(h, "newer", "newer"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a first attempt at a full queue: %d, want 503", rec.Code)
	}
	wg.Go(func() { serveKey(h, "retry", "old") })
	for i := 0; i < 5000 && s.Stats().Refused[Displaced] == 0; i++ {
		time.Sleep(time.Millisecond)
	}
	waitQueued(t, s, 1)
	b.release <- struct{}{}
	if n := <-b.entered; n != "retry" {
		t.Errorf("the freed slot went to %s, want the retry", n)
	}
	close(b.release)
	wg.Wait()
	if newRec.Code != http.StatusServiceUnavailable || newRec.Header().Get("Retry-After") == "" {
		t.Errorf("the displaced first attempt: %d Retry-After %q, want 503 with a hint", newRec.Code, newRec.Header().Get("Retry-After"))
	}
	if st := s.Stats(); st.Refused[Displaced] != 1 || st.Refused[Full] != 1 || st.Admitted != 2 {
		t.Errorf("stats %+v, want 2 admitted, 1 refused as full, 1 displaced", st)
	}
}

// The hint follows the drain time: 0 while the queue drains in
// milliseconds, seconds when a request holds its slot for seconds, never
// beyond RetryAfter.
func TestRetryAfterFollowsDrainTime(t *testing.T) {
	for _, c := range []struct {
		service time.Duration
		queued  int
		jitter  bool
		cap     time.Duration
		want    int64
	}{
		{10 * time.Millisecond, 8, true, 0, 0},
		{200 * time.Millisecond, 1, true, 0, 0},
		{200 * time.Millisecond, 5, false, 0, 0},
		{200 * time.Millisecond, 5, true, 0, 1},
		{1500 * time.Millisecond, 0, false, 10 * time.Second, 1},
		{1500 * time.Millisecond, 0, true, 10 * time.Second, 3},
		{1500 * time.Millisecond, 3, true, 0, 2},
	} {
		rand := func(int64) int64 { return 0 }
		if c.jitter {
			rand = func(n int64) int64 { return n - 1 }
		}
		s := mustNew(t, Config{MaxInFlight: 2, RetryAfter: c.cap, Rand: rand})
		s.service.Observe(c.service)
		if got := s.retryAfter(c.queued); got != c.want {
			t.Errorf("%+v: Retry-After %d, want %d", c, got, c.want)
		}
	}
}

// A refusal while the handler answers in milliseconds says "Retry-After:
// 0".
func TestFastDrainRefusedWithZero(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, Rand: func(n int64) int64 { return n - 1 }})
	fast := newBlocking()
	close(fast.release)
	serve(context.Background(), s.Middleware(fast), "fast")
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serve(context.Background(), h, "a") })
	<-b.entered
	rec := serve(context.Background(), h, "refused")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "0" {
		t.Errorf("refused behind a fast handler: %d Retry-After %q, want 503 and 0", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(b.release)
	wg.Wait()
}
