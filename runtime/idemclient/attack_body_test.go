package idemclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A body whose GetBody returns other bytes cannot make a retry send them:
// every attempt sends the bytes the first one read.
func TestAttackGetBodyDiffers(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){fail(errors.New("reset")), answer(201, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	req, _ := http.NewRequest(http.MethodPost, "http://api.test/transfers", strings.NewReader(`{"amount":5}`))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(`{"amount":500}`)), nil }
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if len(s.got) != 2 || s.got[1].body != `{"amount":5}` || s.got[0].key != s.got[1].key {
		t.Errorf("attempts %+v; want the first body twice under one key", s.got)
	}
}

// A request body that streams and never ends does not hold the call past
// its context.
func TestAttackStreamingBodyRespectsContext(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	tr, err := New(Config{Operations: []Operation{transferOp()}, Base: rtFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("nothing may be sent")
	})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.test/transfers", pr)
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the context's deadline", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("RoundTrip still reading the request body 3s after its context ended")
	}
}

// A body larger than the Transport keeps in memory (4 MiB by default) is
// not buffered whole for retries: it is sent once, streamed on from what
// was read of it, with its key, and never retried.
func TestAttackBodyBeyondBufferLimit(t *testing.T) {
	big := strings.Repeat("x", 4<<20+1)
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(503, nil, ""), answer(201, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), http.MethodPost, "http://api.test/transfers", io.NopCloser(strings.NewReader(big)))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(s.got) != 1 || s.got[0].body != big || s.got[0].key == "" || rep.Attempts != 1 || rep.Key != s.got[0].key {
		t.Errorf("%d attempts, report %+v; want the whole body sent once with a key", len(s.got), rep)
	}

	// Under a limit of the caller's, the same holds for a small body.
	s = &script{answers: []func(*http.Request) (*http.Response, error){answer(503, nil, ""), answer(201, nil, "")}}
	tr, _ = newTest(t, s, Config{MaxBodyBytes: 4})
	if _, rep, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{"amount":5}`); len(s.got) != 1 || s.got[0].body != `{"amount":5}` || rep.Attempts != 1 {
		t.Errorf("%d attempts, report %+v; want the body sent once", len(s.got), rep)
	}
}
