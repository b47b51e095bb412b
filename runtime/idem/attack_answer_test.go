package idem_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// These tests attack what the engine stores and answers, as a user's
// handler, network or client would treat it. Each holds on the current
// code; they keep it that way.

// A client that hangs up while the handler runs does not cut the
// request's work off: the handler finishes, its answer is stored, and the
// client's retry gets the replay, over a real http.Server.
func TestAttackClientHangsUpDuringTheHandler(t *testing.T) {
	var runs atomic.Int64
	gone := make(chan struct{})
	done := make(chan struct{})
	e := newEngine(t, idem.Config{Policies: []idem.Policy{transferPolicy()}})
	srv := httptest.NewServer(e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		runs.Add(1)
		<-r.Context().Done() // the client is gone; the work goes on
		close(gone)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1"}`))
	})))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":1,"to":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k1")
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	if _, err := srv.Client().Do(req); err == nil {
		t.Fatalf("the request was not cut off")
	}
	<-gone
	<-done
	// The engine finishes after the handler returns; give it a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":1,"to":"a"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") == "true" {
			break
		}
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry = %d %v, want a 201 replay", resp.StatusCode, resp.Header)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// lateStore commits a claim, then reports that it timed out: the commit
// happened, the answer did not arrive.
type lateStore struct {
	*memstore.Store
	fail atomic.Bool
}

func (s *lateStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && s.fail.CompareAndSwap(true, false) {
		return idemstore.Result{}, context.DeadlineExceeded
	}
	return res, err
}

// A claim whose store timed out after committing it answers 503, and the
// handler never ran: the claim is released by its token, so the retry
// runs instead of meeting 409 in progress, or outcome-unknown under
// fail-closed.
func TestAttackStoreTimesOutAfterCommittingTheClaim(t *testing.T) {
	var runs atomic.Int64
	s := &lateStore{Store: memstore.New()}
	s.fail.Store(true)
	e := newEngine(t, idem.Config{Store: s, Policies: []idem.Policy{transferPolicy()}})
	h := e.Middleware(created(&runs))
	expect(t, post(t, h, "/transfers", "k1"), http.StatusServiceUnavailable, "idempotency-store-unavailable")
	if runs.Load() != 0 {
		t.Fatalf("the handler ran after a failed claim")
	}
	if w := post(t, h, "/transfers", "k1"); w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("retry = %d (runs %d), want 201 from one run", w.Code, runs.Load())
	}
}

// Answers a handler can give without a final status: a 1xx only, nothing
// at all. None is stored as a 200; the retry runs the handler again (the
// claim was abandoned under takeover).
func TestAttackNoFinalStatusIsNeverStored(t *testing.T) {
	for name, write := range map[string]func(http.ResponseWriter){
		"early hints only": func(w http.ResponseWriter) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		},
		"headers only": func(w http.ResponseWriter) { w.Header().Set("X-Half", "1") },
	} {
		t.Run(name, func(t *testing.T) {
			var runs atomic.Int64
			p := transferPolicy()
			p.OnLeaseExpiry = idemstore.Takeover
			e := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
			h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					write(w)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			expect(t, post(t, h, "/transfers", "k1"), http.StatusInternalServerError, "handler-failed")
			w := post(t, h, "/transfers", "k1")
			if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") == "true" || runs.Load() != 2 {
				t.Fatalf("retry = %d %v (runs %d), want a fresh 201", w.Code, w.Header(), runs.Load())
			}
		})
	}
}

// A gzip body, header values with NUL and bytes that are not UTF-8, a
// Flush in the middle and a refused Hijack: the replay is the first answer
// byte for byte, headers included.
func TestAttackReplayIsByteIdenticalForOddAnswers(t *testing.T) {
	var runs atomic.Int64
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"id":"tr_1"}`))
	_ = zw.Close()
	p := transferPolicy()
	p.ReplayHeaders = append(p.ReplayHeaders, "X-Odd")
	e := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
			t.Errorf("a protected handler hijacked its connection")
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header()["X-Odd"] = []string{"a\x00b", "\xff\xfe", ""}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(gz.Bytes()[:5])
		if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("Flush: %v", err)
		}
		_, _ = w.Write(gz.Bytes()[5:])
	}))
	first := post(t, h, "/transfers", "k1")
	again := post(t, h, "/transfers", "k1")
	if runs.Load() != 1 || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("runs %d, retry %d %v", runs.Load(), again.Code, again.Header())
	}
	if !bytes.Equal(first.Body.Bytes(), gz.Bytes()) || !bytes.Equal(again.Body.Bytes(), gz.Bytes()) {
		t.Fatalf("bodies differ from the handler's")
	}
	for _, name := range []string{"Content-Encoding", "Content-Type", "X-Odd"} {
		if a, b := first.Header().Values(name), again.Header().Values(name); strings.Join(a, "|") != strings.Join(b, "|") {
			t.Fatalf("%s: first %q, replay %q", name, a, b)
		}
	}
}

// In transactional mode not a byte leaves before the commit, whatever the
// size: a body larger than the snapshot limit is sent whole after the
// commit, and its replays are 409 response-not-replayable.
func TestAttackTransactionalBodyLargerThanTheSnapshot(t *testing.T) {
	var runs atomic.Int64
	p := transferPolicy()
	p.Transactional = true
	p.OnLeaseExpiry = idemstore.Takeover
	big := bytes.Repeat([]byte("x"), int(p.MaxSnapshotBytes)*4)
	e := newEngine(t, idem.Config{Store: &txStore{memstore.New()}, Policies: []idem.Policy{p}})
	h := e.Middleware(idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, _ string) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(big)
	}))
	first := post(t, h, "/transfers", "k1")
	if first.Code != http.StatusCreated || !bytes.Equal(first.Body.Bytes(), big) {
		t.Fatalf("first = %d, %d bytes", first.Code, first.Body.Len())
	}
	expect(t, post(t, h, "/transfers", "k1"), http.StatusConflict, "response-not-replayable")
	if runs.Load() != 1 {
		t.Fatalf("runs %d, want 1", runs.Load())
	}
}
