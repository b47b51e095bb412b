package idemshed

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/problem"
)

// blocking is a handler that holds each request until its release is
// closed, and counts the requests it served.
type blocking struct {
	mu      sync.Mutex
	served  []string
	entered chan string
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{entered: make(chan string, 100), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("n")
	b.mu.Lock()
	b.served = append(b.served, name)
	b.mu.Unlock()
	b.entered <- name
	<-b.release
	w.WriteHeader(http.StatusCreated)
}

func (b *blocking) servedNames() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.served...)
}

// serve sends one request named n through h and returns its recorder
// when h has answered.
func serve(ctx context.Context, h http.Handler, n string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "POST", "/t?n="+n, nil))
	return rec
}

func mustNew(t *testing.T, cfg Config) *Shedder {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitQueued waits until n requests wait in s's queue.
func waitQueued(t *testing.T, s *Shedder, n int) {
	t.Helper()
	for range 10000 {
		s.mu.Lock()
		l := len(s.queue)
		s.mu.Unlock()
		if l == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the queue never held %d requests", n)
}

// A request beyond the in-flight bound with no queue is refused at once
// with a 503 problem and a Retry-After, and never reaches the handler.
func TestOverCapacityRefusedAtOnce(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 2, RetryAfter: 3 * time.Second, Rand: func(n int64) int64 { return n - 1 }})
	s.service.Observe(time.Second)
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	for _, n := range []string{"a", "b"} {
		wg.Go(func() { serve(context.Background(), h, n) })
		<-b.entered
	}
	rec := serve(context.Background(), h, "c")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d, want 503", rec.Code)
	}
	if got := rec.Header().Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2 (a second's drain and the largest jitter)", got)
	}
	var p details
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != problem.DefaultBase+problem.Overloaded || p.Status != 503 {
		t.Errorf("body %q is not the overloaded problem (%v)", rec.Body, err)
	}
	close(b.release)
	wg.Wait()
	if got := b.servedNames(); len(got) != 2 {
		t.Errorf("handler served %v, want only a and b", got)
	}
	st := s.Stats()
	if st.Admitted != 2 || st.Refused[Full] != 1 {
		t.Errorf("stats %+v, want 2 admitted and 1 refused as full", st)
	}
	// Every slot is free again: a request is served at once.
	b2 := newBlocking()
	close(b2.release)
	if rec := serve(context.Background(), s.Middleware(b2), "d"); rec.Code != http.StatusCreated {
		t.Errorf("after the slots were freed: %d, want 201", rec.Code)
	}
}

// A queued request is served when a slot frees up, oldest first while the
// queue is not congested.
func TestQueuedServedInOrder(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, MaxQueue: 2, MaxWait: time.Hour, CongestedWait: time.Hour})
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serve(context.Background(), h, "a") })
	<-b.entered
	wg.Go(func() { serve(context.Background(), h, "b") })
	waitQueued(t, s, 1)
	wg.Go(func() { serve(context.Background(), h, "c") })
	waitQueued(t, s, 2)
	if rec := serve(context.Background(), h, "d"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a request beyond the queue: %d, want 503", rec.Code)
	}
	b.release <- struct{}{}
	if n := <-b.entered; n != "b" {
		t.Errorf("the freed slot went to %s, want the oldest waiter b", n)
	}
	close(b.release)
	wg.Wait()
	if st := s.Stats(); st.Admitted != 3 || st.Queued != 2 || st.Refused[Full] != 1 {
		t.Errorf("stats %+v, want 3 admitted, 2 queued, 1 refused as full", st)
	}
}

// While the queue has not been empty for MaxWait, a freed slot goes to the
// newest waiter: its client is the one most likely to still be waiting.
func TestCongestedQueueServesNewestFirst(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, MaxQueue: 3, MaxWait: time.Hour, CongestedWait: time.Hour})
	clock := time.Now()
	var mu sync.Mutex
	s.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serve(context.Background(), h, "a") })
	<-b.entered
	wg.Go(func() { serve(context.Background(), h, "old") })
	waitQueued(t, s, 1)
	mu.Lock()
	clock = clock.Add(2 * time.Hour)
	mu.Unlock()
	wg.Go(func() { serve(context.Background(), h, "new") })
	waitQueued(t, s, 2)
	b.release <- struct{}{}
	if n := <-b.entered; n != "new" {
		t.Errorf("the freed slot of a congested queue went to %s, want the newest waiter", n)
	}
	close(b.release)
	wg.Wait()
}

// A request that waits its bound for a slot is refused and never served.
func TestWaitBoundRefuses(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, MaxQueue: 1, MaxWait: time.Millisecond})
	b := newBlocking()
	h := s.Middleware(b)
	var wg sync.WaitGroup
	wg.Go(func() { serve(context.Background(), h, "a") })
	<-b.entered
	if rec := serve(context.Background(), h, "late"); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a request that waited its bound: %d, want 503", rec.Code)
	}
	close(b.release)
	wg.Wait()
	if got := b.servedNames(); len(got) != 1 {
		t.Errorf("handler served %v, want only a", got)
	}
	if st := s.Stats(); st.Refused[Waited] != 1 || st.Queued != 1 {
		t.Errorf("stats %+v, want 1 queued and refused after its wait", st)
	}
}

// A request whose client has hung up is never started: neither one that
// arrives so nor one whose client leaves while it waits; the slot it
// waited for is not lost.
func TestGoneClientNeverServed(t *testing.T) {
	s := mustNew(t, Config{MaxInFlight: 1, MaxQueue: 1, MaxWait: time.Hour, CongestedWait: time.Hour})
	b := newBlocking()
	h := s.Middleware(b)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	serve(gone, h, "gone-before")

	var wg sync.WaitGroup
	wg.Go(func() { serve(context.Background(), h, "a") })
	<-b.entered
	leaving, leave := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { serve(leaving, h, "gone-waiting"); close(done) }()
	waitQueued(t, s, 1)
	leave()
	<-done
	close(b.release)
	wg.Wait()
	if rec := serve(context.Background(), h, "b"); rec.Code != http.StatusCreated {
		t.Errorf("after the gone client left the queue: %d, want 201", rec.Code)
	}
	for _, n := range b.servedNames() {
		if n == "gone-before" || n == "gone-waiting" {
			t.Errorf("the handler served %s, whose client had hung up", n)
		}
	}
	if st := s.Stats(); st.Refused[Gone] != 2 || st.Admitted != 2 {
		t.Errorf("stats %+v, want 2 admitted and 2 refused as gone", st)
	}
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{MaxInFlight: 1, MaxQueue: -1},
		{MaxInFlight: 1, MaxWait: time.Millisecond, CongestedWait: time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
