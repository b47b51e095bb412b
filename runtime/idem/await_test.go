package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// countingStore counts the claims made and the store calls under way.
type countingStore struct {
	idemstore.Store
	claims, active atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	s.active.Add(1)
	defer s.active.Add(-1)
	defer s.claims.Add(1)
	return s.Store.Claim(ctx, c)
}

func (s *countingStore) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	s.active.Add(1)
	defer s.active.Add(-1)
	return s.Store.Complete(ctx, id, token, resp)
}

// waiting is an engine with DuplicateWait over a counting store, whose
// handler holds each request until release is closed.
type waiting struct {
	store   *countingStore
	h       http.Handler
	runs    atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func newWaiting(t *testing.T, wait time.Duration) *waiting {
	t.Helper()
	store := &countingStore{Store: memstore.New()}
	f := serveWaiting(t, idem.Config{Store: store, Policies: []idem.Policy{transferPolicy()}, DuplicateWait: wait})
	f.store = store
	return f
}

// serveWaiting serves the waiting handler behind an engine of cfg.
func serveWaiting(t *testing.T, cfg idem.Config) *waiting {
	t.Helper()
	f := &waiting{entered: make(chan struct{}, 10), release: make(chan struct{})}
	cfg.Tenant = func(*http.Request) (string, bool) { return "acme", true }
	e, err := idem.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.h = e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.runs.Add(1)
		if _, ok := idem.TxFrom[string](r.Context()); cfg.Policies[0].Transactional && !ok {
			t.Error("the transactional handler has no transaction")
		}
		if r.Header.Get("X-Hold") != "" {
			f.entered <- struct{}{}
			<-f.release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	}))
	return f
}

// send sends a request under key; hold keeps it in the handler until
// release is closed.
func (f *waiting) send(key string, hold bool) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	if hold {
		r.Header.Set("X-Hold", "1")
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// A concurrent duplicate waits for the first request's answer and
// replays it, holding no store call while it waits and claiming once
// more, when the first ends, not in a loop.
func TestDuplicateWaitsForTheAnswer(t *testing.T) {
	f := newWaiting(t, time.Minute)
	first, dup := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- f.send("k", true) }()
	<-f.entered
	go func() { dup <- f.send("k", true) }()
	for f.store.claims.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case w := <-dup:
		t.Fatalf("the duplicate was answered %d while the first ran", w.Code)
	default:
	}
	if n := f.store.active.Load(); n != 0 {
		t.Errorf("%d store calls under way while the duplicate waits, want none", n)
	}
	if n := f.store.claims.Load(); n != 2 {
		t.Errorf("%d claims while the duplicate waits, want 2", n)
	}
	close(f.release)
	expect(t, <-first, http.StatusCreated, "")
	w := <-dup
	expect(t, w, http.StatusCreated, "")
	if w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != `{"id":"tr_1"}` {
		t.Errorf("the duplicate got %v %q, want the first's replay", w.Header(), w.Body)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if n := f.store.claims.Load(); n != 3 {
		t.Errorf("%d claims, want 3: the duplicate claims again once, when woken", n)
	}
}

// Past its bound, the waiting duplicate is answered 409 with a
// Retry-After, and the first request is not disturbed.
func TestDuplicateWaitIsBounded(t *testing.T) {
	f := newWaiting(t, 40*time.Millisecond)
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- f.send("k", true) }()
	<-f.entered
	began := time.Now()
	w := f.send("k", true)
	expect(t, w, http.StatusConflict, problem.InProgress)
	if took := time.Since(began); took < 40*time.Millisecond {
		t.Errorf("the duplicate was answered after %v, before its bound of 40 ms", took)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Error("the 409 has no Retry-After")
	}
	close(f.release)
	expect(t, <-first, http.StatusCreated, "")
}

// Without DuplicateWait the duplicate is answered 409 at once; behind a
// handler that answers in milliseconds its hint is "Retry-After: 0".
func TestDuplicateWithoutWaitIs409(t *testing.T) {
	f := newWaiting(t, 0)
	for _, k := range []string{"a", "b", "c"} {
		expect(t, f.send(k, false), http.StatusCreated, "")
	}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- f.send("k", true) }()
	<-f.entered
	w := f.send("k", true)
	expect(t, w, http.StatusConflict, problem.InProgress)
	if ra, ok := w.Header()["Retry-After"]; !ok || ra[0] != "0" {
		t.Errorf("Retry-After %q behind a handler of microseconds, want 0", ra)
	}
	close(f.release)
	expect(t, <-first, http.StatusCreated, "")
}

// A transactional operation's duplicate waits the same way: it claims
// again inside a transaction of its own once the first commits, and
// replays its answer.
func TestTransactionalDuplicateWaitsForTheAnswer(t *testing.T) {
	p := transferPolicy()
	p.Transactional = true
	f := serveWaiting(t, idem.Config{Store: &txStore{memstore.New()}, Policies: []idem.Policy{p}, DuplicateWait: time.Minute})
	first, dup := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- f.send("k", true) }()
	<-f.entered
	go func() { dup <- f.send("k", true) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case w := <-dup:
		t.Fatalf("the duplicate was answered %d while the first ran", w.Code)
	default:
	}
	close(f.release)
	expect(t, <-first, http.StatusCreated, "")
	w := <-dup
	expect(t, w, http.StatusCreated, "")
	if w.Header().Get("Idempotent-Replayed") != "true" || f.runs.Load() != 1 {
		t.Errorf("the duplicate got %v %q after %d runs, want the first's replay after one", w.Header(), w.Body, f.runs.Load())
	}
}

// At most DuplicateWaiters requests (1 when zero) wait for one key's
// answer; the next copy is answered 409 at once.
func TestDuplicateWaitersBounded(t *testing.T) {
	for _, waiters := range []int{0, 2} {
		store := &countingStore{Store: memstore.New()}
		f := serveWaiting(t, idem.Config{Store: store, Policies: []idem.Policy{transferPolicy()},
			DuplicateWait: time.Minute, DuplicateWaiters: waiters})
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- f.send("k", true) }()
		<-f.entered
		want := max(waiters, 1)
		dups := make(chan *httptest.ResponseRecorder, want)
		for i := range want {
			go func() { dups <- f.send("k", true) }()
			for store.claims.Load() < int64(i+2) {
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(20 * time.Millisecond) // the copies are waiting
		began := time.Now()
		expect(t, f.send("k", true), http.StatusConflict, problem.InProgress)
		if took := time.Since(began); took > time.Second {
			t.Errorf("DuplicateWaiters %d: the copy past the bound was answered after %v, want at once", waiters, took)
		}
		close(f.release)
		expect(t, <-first, http.StatusCreated, "")
		for range want {
			expect(t, <-dups, http.StatusCreated, "")
		}
	}
}
