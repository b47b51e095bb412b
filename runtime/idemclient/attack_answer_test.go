package idemclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The attack tests play a hostile or broken server, network or caller
// against the Transport.

// A server that answers 409 in-progress for ever is given up on within the
// attempts and the budget, however short its Retry-After.
func TestAttackConflictForEver(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"type":"https://idemgen.dev/problems/request-in-progress"}`)
	}))
	defer srv.Close()
	tr, err := New(Config{Operations: []Operation{transferOp()}, MaxAttempts: 1000, Budget: 300 * time.Millisecond, BackoffBase: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, rep, err := post(t, tr, context.Background(), srv.URL+"/transfers", `{}`)
	if err != nil || res.StatusCode != 409 || !rep.GaveUp || time.Since(start) > 2*time.Second || int(n.Load()) != rep.Attempts {
		t.Errorf("%v, report %+v after %v; want the 409, given up within the budget", err, rep, time.Since(start))
	}
}

// A connection reset after the request was sent is retried with the same
// key and the same bytes; a POST outside the table is not retried at all.
func TestAttackResetAfterBodySent(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
		keys   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		first := len(bodies) == 1
		mu.Unlock()
		if first {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	tr, err := New(Config{Operations: []Operation{transferOp()}, BackoffBase: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, rep, err := post(t, tr, context.Background(), srv.URL+"/transfers", `{"amount":5}`)
	if err != nil || res.StatusCode != 201 || len(bodies) != 2 || bodies[0] != bodies[1] || keys[0] != keys[1] || keys[0] == "" {
		t.Fatalf("%v, report %+v: bodies %q keys %q; want the same key and bytes twice", err, rep, bodies, keys)
	}
	_, rep, err = post(t, tr, context.Background(), srv.URL+"/refunds", `{}`)
	if err != nil || rep.Attempts != 1 || len(bodies) != 3 {
		t.Errorf("a POST outside the table: %v, report %+v; want one attempt", err, rep)
	}
}

// stallServer answers its first request with status and headers, then
// stalls before the body until the client goes away; later requests get a
// 201.
func stallServer(t *testing.T, status int, h http.Header) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	release := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			w.WriteHeader(http.StatusCreated)
			return
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv, &n
}

// A server that sends a retryable answer's headers and then stalls its
// body is abandoned after the attempt timeout, like one that never
// answers: what the Transport itself reads of an answer (the problem type
// of a 409, the start of a 503 it discards) belongs to the attempt.
func TestAttackStalledBodyBoundedByAttemptTimeout(t *testing.T) {
	for _, status := range []int{http.StatusConflict, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			srv, n := stallServer(t, status, http.Header{"Content-Type": {"application/problem+json"}})
			tr, err := New(Config{Operations: []Operation{transferOp()}, AttemptTimeout: 100 * time.Millisecond, BackoffBase: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			res, rep, err := post(t, tr, ctx, srv.URL+"/transfers", `{}`)
			if err != nil || res.StatusCode != http.StatusCreated || n.Load() != 2 {
				t.Fatalf("after %v: %v, report %+v, %d requests; want a 201 on the second attempt", time.Since(start), err, rep, n.Load())
			}
		})
	}
}

// A final answer's body is the caller's to read at its own pace: the
// attempt timeout ends when the headers arrive.
func TestAttackSlowFinalBodyOutlivesAttemptTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.(http.Flusher).Flush()
		time.Sleep(150 * time.Millisecond)
		_, _ = io.WriteString(w, `{"id":"tr_1"}`)
	}))
	defer srv.Close()
	tr, err := New(Config{Operations: []Operation{transferOp()}, AttemptTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != `{"id":"tr_1"}` {
		t.Errorf("body %q, %v; want it whole", b, err)
	}
}
