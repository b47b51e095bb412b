package idem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A timeout middleware answers its client while the handler behind it
// goes on running. Between the engine and the handler it would hide that
// the handler still runs (the engine would release on its 503 and a retry
// run the handler beside the first run), so it wraps the engine
// (docs/semantics.md §3.4): the engine then lets the handler finish and
// stores its answer, a retry meanwhile meets the claim in flight, and a
// retry after gets the replay. One run.
func TestTimeoutMiddlewareWrapsTheEngine(t *testing.T) {
	var runs atomic.Int64
	done := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		runs.Add(1)
		time.Sleep(300 * time.Millisecond) // the processor is slow today
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	})
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	h := http.TimeoutHandler(e.Middleware(slow), 50*time.Millisecond, "timed out")
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://example.test/transfers", strings.NewReader(`{"amount":1,"to":"a"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	first := send()
	during := send()
	<-done
	var after *httptest.ResponseRecorder
	for range 50 { // the engine stores the answer just after the handler returns
		if after = send(); after.Code != http.StatusConflict {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if first.Code != http.StatusServiceUnavailable || during.Code != http.StatusConflict {
		t.Errorf("first %d %q, a retry while the handler runs %d %q; want the timeout's 503, then 409", first.Code, first.Body, during.Code, during.Body)
	}
	if after.Code != http.StatusCreated || after.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retry once the handler returned: %d replayed=%q %q; want the stored 201", after.Code, after.Header().Get("Idempotent-Replayed"), after.Body)
	}
	if runs.Load() != 1 {
		t.Fatalf("one key ran the handler %d times", runs.Load())
	}
}
