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
