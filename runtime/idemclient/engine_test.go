package idemclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// server is the engine over a memstore in front of a handler whose first
// run is slower than the client's attempt timeout.
func server(t *testing.T, runs *atomic.Int64) *httptest.Server {
	t.Helper()
	return transferServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"tr_1"}`)
	}))
}

// transferServer is the engine over a memstore, protecting POST /transfers
// (a header key, fail-closed, server errors stored when cacheServerErrors),
// in front of h.
func transferServer(t *testing.T, cacheServerErrors bool, h http.Handler) *httptest.Server {
	t.Helper()
	e, err := idem.New(idem.Config{
		Store: memstore.New(),
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
			p.TTL, p.CacheServerErrors = time.Hour, cacheServerErrors
		})},
		Tenant: func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Middleware(h))
	t.Cleanup(srv.Close)
	return srv
}

func clientOps() []idemclient.Operation {
	return []idemclient.Operation{{
		ID: "createTransfer", Method: http.MethodPost, Path: "/transfers",
		Key: idemclient.Key{In: key.InHeader, Name: "Idempotency-Key"}, KeyMaxLength: 255, TTL: time.Hour,
	}}
}

// A first attempt that times out while the handler runs is retried under
// the same key: the retries meet 409 request-in-progress until the handler
// is done, then its replay. The handler runs once.
func TestAgainstEngine(t *testing.T) {
	var runs atomic.Int64
	srv := server(t, &runs)
	tr, err := idemclient.New(idemclient.Config{
		Operations: clientOps(), AttemptTimeout: 100 * time.Millisecond,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rep idemclient.Report
	ctx := idemclient.WithReport(context.Background(), &rep)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || string(body) != `{"id":"tr_1"}` {
		t.Fatalf("answer %d %s, want the 201", res.StatusCode, body)
	}
	if !rep.Replayed || rep.Attempts < 2 || rep.GaveUp {
		t.Errorf("report %+v, want a replay after at least 2 attempts", rep)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// Two calls with the same key and different bodies: the second is the
// server's 422, final, never retried.
func TestKeyReusedIsFinal(t *testing.T) {
	var runs atomic.Int64
	runs.Store(1) // no slow first run
	srv := server(t, &runs)
	tr, err := idemclient.New(idemclient.Config{Operations: clientOps()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := idemclient.WithKey(context.Background(), "same-key")
	for i, body := range []string{`{"amount":5}`, `{"amount":6}`} {
		var rep idemclient.Report
		req, _ := http.NewRequestWithContext(idemclient.WithReport(ctx, &rep), http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if i == 1 && (res.StatusCode != http.StatusUnprocessableEntity || idemclient.ProblemType(b) != problem.KeyReused || rep.Attempts != 1) {
			t.Errorf("changed body under a used key: %d %s after %d attempts, want one 422 %s", res.StatusCode, b, rep.Attempts, problem.KeyReused)
		}
	}
}

// A 500 stored under cacheServerErrors is the server's record of the call:
// the first attempt meets the 500 as it happens and retries (the client
// cannot tell it was stored), the retry meets its replay and stops. A
// later call with the same key meets the replay at once: one attempt. The
// handler runs once.
func TestReplayedServerErrorIsFinal(t *testing.T) {
	var runs atomic.Int64
	srv := transferServer(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	tr, err := idemclient.New(idemclient.Config{Operations: clientOps(), BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context) idemclient.Report {
		var rep idemclient.Report
		req, _ := http.NewRequestWithContext(idemclient.WithReport(ctx, &rep), http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount":5}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return rep
	}
	rep := call(context.Background())
	if rep.Attempts != 2 || rep.Status != 500 || !rep.Replayed || rep.GaveUp {
		t.Errorf("first call: report %+v; want the 500, then its replay, final after 2 attempts", rep)
	}
	rep = call(idemclient.WithKey(context.Background(), rep.Key))
	if rep.Attempts != 1 || rep.Status != 500 || !rep.Replayed || rep.GaveUp {
		t.Errorf("calling again: report %+v; want the stored 500's replay, final after 1 attempt", rep)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}
