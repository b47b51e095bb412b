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
	"github.com/idemgen/idemgen/runtime/memstore"
)

// stallingStore is a memstore whose Complete waits for its context to end,
// as a store that stopped answering would, and which records the contexts
// it was given.
type stallingStore struct {
	*memstore.Store
	claimErr   atomic.Value // error of the Claim context when Claim ran
	completeDL atomic.Bool  // the Complete context had a deadline
}

func (s *stallingStore) Claim(ctx context.Context, c idem.Claim) (idem.Result, error) {
	s.claimErr.Store(errString(ctx.Err()))
	return s.Store.Claim(ctx, c)
}

func (s *stallingStore) Complete(ctx context.Context, id idem.Identity, token string, resp idem.Response) error {
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
// handler's answer is sent (SEMANTICS §3.6: the key stays in flight).
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

// A client that hung up before the claim does not cut the claim off: the
// store sees a context of its own.
func TestClaimOutlivesTheClient(t *testing.T) {
	s := &stallingStore{Store: memstore.New()}
	e := newEngine(t, idem.Config{Store: s, StoreTimeout: 50 * time.Millisecond, Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(`{}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k")
	var runs atomic.Int64
	e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})).ServeHTTP(httptest.NewRecorder(), r)
	if got, _ := s.claimErr.Load().(string); got != "" {
		t.Fatalf("the claim ran under a context that was already done: %s", got)
	}
}

// A handler that returns without writing gave no answer: nothing is stored
// as an empty 200, and the claim is abandoned under onLeaseExpiry
// (fail-closed here), so a retry meets outcome-unknown, never a replay.
func TestNoAnswerIsNeverStored(t *testing.T) {
	e := newEngine(t, idem.Config{Policies: []idem.Policy{pathPolicy("createOrder", "/orders")}})
	h := e.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	expect(t, post(t, h, "/orders", "k"), http.StatusInternalServerError, idem.ProblemHandlerFailed)
	w := post(t, h, "/orders", "k")
	if w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("a retry replayed an answer nobody gave: %d %s", w.Code, w.Body)
	}
	expect(t, w, http.StatusConflict, idem.ProblemOutcomeUnknown)
}
