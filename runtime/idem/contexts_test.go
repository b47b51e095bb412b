package idem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// stallingStore is a memstore whose Complete waits for its context to end,
// as a store that stopped answering would, and which records the contexts
// it was given.
type stallingStore struct {
	*memstore.Store
	claimErr   atomic.Value // error of the Claim context when Claim ran
	completeDL atomic.Bool  // the Complete context had a deadline
}

func (s *stallingStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	s.claimErr.Store(errString(ctx.Err()))
	return s.Store.Claim(ctx, c)
}

func (s *stallingStore) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	_, ok := ctx.Deadline()
	s.completeDL.Store(ok)
	<-ctx.Done()
	return ctx.Err()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A store that stalls after the handler ran cannot hold the client's answer
// forever: the completion gives up after Config.StoreTimeout and the
// handler's answer is sent (docs/semantics.md §3.6: the key stays in flight).
func TestStalledCompletionIsBounded(t *testing.T) {
	s := &stallingStore{Store: memstore.New()}
	e := newEngine(t, idem.Config{Store: s, StoreTimeout: 100 * time.Millisecond, Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	var runs atomic.Int64
	h := e.Middleware(created(&runs))
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- post(t, h, "/orders", "k") }()
	select {
	case w := <-done:
		if w.Code != http.StatusCreated {
			t.Fatalf("answer %d, want the handler's 201", w.Code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request is still waiting on a stalled store after 5s")
	}
	if !s.completeDL.Load() {
		t.Error("the completion ran without a deadline")
	}
}

// hangUpStore is a memstore whose Claim hangs up the request's client
// (hangUp) after it has claimed, and records the error of its own context
// when it ran and how many claims it made.
type hangUpStore struct {
	*memstore.Store
	hangUp   func()
	claimErr atomic.Value
	claims   atomic.Int64
}

func (s *hangUpStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	s.claims.Add(1)
	res, err := s.Store.Claim(ctx, c)
	if s.hangUp != nil {
		s.hangUp()
	}
	s.claimErr.Store(errString(ctx.Err()))
	return res, err
}

// postFrom posts to /orders under key with ctx as the client's context.
func postFrom(ctx context.Context, h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A request whose client hung up before its claim claims nothing and runs
// nothing: it is answered 503 client-gone, counted under
// OutcomeClientGone, and the key is a first try for the client's retry.
func TestGoneClientClaimsNothing(t *testing.T) {
	s := &hangUpStore{Store: memstore.New()}
	var outcomes []idem.Outcome
	e := newEngine(t, idem.Config{Store: s, Policies: []idem.Policy{pathPolicy("createOrder", "/orders")},
		Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) { outcomes = append(outcomes, ev.Outcome) })})
	var runs atomic.Int64
	h := e.Middleware(created(&runs))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	expect(t, postFrom(gone, h, "k"), http.StatusServiceUnavailable, problem.ClientGone)
	if n := s.claims.Load(); n != 0 {
		t.Errorf("%d claims for a client that had hung up, want 0", n)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times for a client that had hung up", n)
	}
	if w := post(t, h, "/orders", "k"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("the retry: %d replayed=%q, want a first run's 201", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if len(outcomes) != 2 || outcomes[0] != idem.OutcomeClientGone {
		t.Errorf("outcomes %v, want client-gone first", outcomes)
	}
}

// A client that hangs up while its claim is made does not cut the claim
// off (the store sees a context of its own), and the handler does not run
// for it: the claim is released, so the retry runs the handler, once.
func TestClientGoneDuringClaim(t *testing.T) {
	s := &hangUpStore{Store: memstore.New()}
	e := newEngine(t, idem.Config{Store: s, StoreTimeout: time.Second, Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	var runs atomic.Int64
	h := e.Middleware(created(&runs))
	ctx, cancel := context.WithCancel(context.Background())
	s.hangUp = cancel
	expect(t, postFrom(ctx, h, "k"), http.StatusServiceUnavailable, problem.ClientGone)
	if got, _ := s.claimErr.Load().(string); got != "" {
		t.Fatalf("the claim ran under the client's context: %s", got)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for a client that had hung up", n)
	}
	s.hangUp = nil
	if w := post(t, h, "/orders", "k"); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("the retry: %d replayed=%q, want a first run's 201: the claim was not released", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A handler that returns without writing gave no answer: nothing is stored
// as an empty 200, and the claim is abandoned under onLeaseExpiry
// (fail-closed here), so a retry meets outcome-unknown, never a replay.
func TestNoAnswerIsNeverStored(t *testing.T) {
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	h := e.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	expect(t, post(t, h, "/orders", "k"), http.StatusInternalServerError, problem.HandlerFailed)
	w := post(t, h, "/orders", "k")
	if w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("a retry replayed an answer nobody gave: %d %s", w.Code, w.Body)
	}
	expect(t, w, http.StatusConflict, problem.OutcomeUnknown)
}

// hangUpBody is a request body whose client hangs up (hangUp) once after
// bytes of it have been read. It counts the bytes read.
type hangUpBody struct {
	r      io.Reader
	after  int
	hangUp func()
	read   int
}

func (b *hangUpBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	if b.read >= b.after && b.hangUp != nil {
		b.hangUp()
		b.hangUp = nil
	}
	return n, err
}

// A client that hangs up after sending the first KiB of a 1 MiB body is
// not read on: the engine stops reading its body (counted in bytes, not
// timed), claims nothing and answers it as gone, for the key, the body's
// fingerprint and a key carried in the body alike.
func TestGoneClientBodyIsNotReadOn(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"idempotency_key":"k"`)
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, `,"m%07d":{"b":1,"a":2}`, i)
	}
	b.WriteString(`}`)
	body := b.String()
	inBody := pathPolicy("createOrder", "/orders")
	inBody.Key = idem.KeySource{In: key.InBody, Name: "/idempotency_key"}
	for _, policy := range []idem.Policy{pathPolicy("createOrder", "/orders"), inBody} {
		s := &hangUpStore{Store: memstore.New()}
		var outcomes []idem.Outcome
		e := newEngine(t, idem.Config{Store: s, Policies: []idem.Policy{policy},
			Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) { outcomes = append(outcomes, ev.Outcome) })})
		var runs atomic.Int64
		h := e.Middleware(created(&runs))
		ctx, cancel := context.WithCancel(context.Background())
		sent := &hangUpBody{r: strings.NewReader(body), after: 1 << 10, hangUp: cancel}
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", sent)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		cancel()
		expect(t, w, http.StatusServiceUnavailable, problem.ClientGone)
		if sent.read > 8<<10 {
			t.Errorf("key in %s: read %d bytes of the body after its client left at 1 KiB", policy.Key.In, sent.read)
		}
		if n := s.claims.Load(); n != 0 {
			t.Errorf("key in %s: %d claims for a client that had hung up, want 0", policy.Key.In, n)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("key in %s: the handler ran %d times for a client that had hung up", policy.Key.In, n)
		}
		if len(outcomes) != 1 || outcomes[0] != idem.OutcomeClientGone {
			t.Errorf("key in %s: outcomes %v, want client-gone", policy.Key.In, outcomes)
		}
	}
}
