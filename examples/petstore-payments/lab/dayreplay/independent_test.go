package dayreplay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The Independent client's wait: its backoff's upper half, doubling from
// 25 ms to 1 s; after a Retry-After, the larger of the backoff and the
// hint, the hint capped at 2 s.
func TestIndependentWait(t *testing.T) {
	for _, c := range []struct {
		n        int
		hint     time.Duration
		min, max time.Duration
	}{
		{0, -1, 12500 * time.Microsecond, 25 * time.Millisecond},
		{2, -1, 50 * time.Millisecond, 100 * time.Millisecond},
		{20, -1, 500 * time.Millisecond, time.Second},
		{0, 0, 12500 * time.Microsecond, 25 * time.Millisecond},
		{0, time.Second, time.Second, time.Second},
		{0, 5 * time.Second, 2 * time.Second, 2 * time.Second},
		{20, 0, 500 * time.Millisecond, time.Second},
	} {
		for range 200 {
			if w := independentWait(c.n, c.hint); w < c.min || w > c.max {
				t.Fatalf("attempt %d, hint %v: waited %v, want within [%v, %v]", c.n, c.hint, w, c.min, c.max)
			}
		}
	}
}

// scripted answers the attempts of one key in turn, each after its delay,
// and records when each came.
type scripted struct {
	mu      sync.Mutex
	answers []scriptedAnswer
	at      []time.Time
	keys    []string
}

type scriptedAnswer struct {
	status     int
	retryAfter string
	delay      time.Duration
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.at)
	s.at = append(s.at, time.Now())
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	a := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	time.Sleep(a.delay)
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(`{"id":"tr_1"}`))
}

func independentAgainst(t *testing.T, s *scripted) (*replayer, func()) {
	t.Helper()
	ts := httptest.NewServer(s)
	c := DefaultConfig()
	c.Client = Independent
	c.Timeout, c.TimeoutMax = 30*time.Millisecond, 80*time.Millisecond
	r, err := newReplayer(ts.URL, []string{"k"}, c)
	if err != nil {
		t.Fatal(err)
	}
	return r, ts.Close
}

// A timed-out attempt is retried under the same key after a backoff; a
// 503 with Retry-After: 1 is waited out; the 201 that follows is final.
func TestIndependentRetries(t *testing.T) {
	s := &scripted{answers: []scriptedAnswer{
		{status: 201, delay: 200 * time.Millisecond},
		{status: 503, retryAfter: "1"},
		{status: 201},
	}}
	r, done := independentAgainst(t, s)
	defer done()
	a, ok := r.send(context.Background(), 0, "/transfers", "key-1", `{}`)
	if !ok || a.status != 201 || a.attempts != 3 {
		t.Fatalf("answer %v (ok %v), want 201 after 3 attempts", a, ok)
	}
	if gap := s.at[2].Sub(s.at[1]); gap < time.Second {
		t.Errorf("retried %v after a 503 with Retry-After: 1, want at least 1 s", gap)
	}
	for i, k := range s.keys {
		if k != "key-1" {
			t.Errorf("attempt %d carried key %q, want key-1", i, k)
		}
	}
	if r.timedOut.Load() != 1 || r.retries.Load() != 2 {
		t.Errorf("%d attempts timed out and %d retries, want 1 and 2", r.timedOut.Load(), r.retries.Load())
	}
}

// A 409 without Retry-After (outcome-unknown) is final; one with it is
// retried.
func TestIndependent409(t *testing.T) {
	s := &scripted{answers: []scriptedAnswer{{status: 409, retryAfter: "0"}, {status: 409}}}
	r, done := independentAgainst(t, s)
	defer done()
	a, ok := r.send(context.Background(), 0, "/transfers", "key-1", `{}`)
	if !ok || a.status != 409 || a.attempts != 2 {
		t.Errorf("answer %v (ok %v), want the 409 without Retry-After as final after 2 attempts", a, ok)
	}
}
