// Package enginetest mounts an idem.Engine in front of a store on a
// loopback HTTP server, for the author of a store: the store's engine tests
// drive the whole engine the way a client does (ServeEngine, Post,
// CheckProblem, CheckReplay, DuplicateStorm, LostCompletion), RunTx runs
// the engine's transactional scenarios against a storetest.Target, and
// Secrets checks that a store keeps no second copy of customers' data.
package enginetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/problem"
)

// EnginePolicy returns a POST policy on path, scoped to the operation, with
// a required Idempotency-Key header, a whole-body fingerprint and a TTL of
// an hour.
func EnginePolicy(id, path string, lease time.Duration, mode idemstore.LeaseExpiry, transactional bool) idem.Policy {
	return idemtest.Policy(id, path, func(p *idem.Policy) {
		p.TTL, p.Lease, p.MaxSnapshotBytes = time.Hour, lease, 64<<10
		p.OnLeaseExpiry, p.Transactional = mode, transactional
	})
}

// EngineServer is an engine mounted on an HTTP test server, with the
// handler's runs counted per key and the observer's outcomes counted per
// outcome. Its methods are safe for concurrent use.
type EngineServer struct {
	srv    *httptest.Server
	client *http.Client

	mu       sync.Mutex
	runs     map[string]int
	outcomes map[idem.Outcome]int
	errs     []error // the errors behind store-error, fenced and panicked outcomes
}

// ServeEngine builds an engine over store with policies and a tenant that is
// always "acme", and serves it with handler behind it until the test ends.
func ServeEngine(t *testing.T, store idemstore.Store, handler http.Handler, policies ...idem.Policy) *EngineServer {
	t.Helper()
	es := &EngineServer{runs: make(map[string]int), outcomes: make(map[idem.Outcome]int)}
	engine, err := idem.New(idem.Config{
		Store:    store,
		Policies: policies,
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) {
			es.mu.Lock()
			es.outcomes[ev.Outcome]++
			if ev.Err != nil {
				es.errs = append(es.errs, fmt.Errorf("%s (status %d, %v in the store): %w", ev.Outcome, ev.Status, ev.StoreDuration.Round(time.Millisecond), ev.Err))
			}
			es.mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es.mu.Lock()
		es.runs[r.Header.Get("Idempotency-Key")]++
		es.mu.Unlock()
		handler.ServeHTTP(w, r)
	})
	es.srv = httptest.NewServer(engine.Middleware(counted))
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second}
	es.client = &http.Client{Transport: tr, Timeout: 15 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		es.srv.Close()
	})
	return es
}

// Close shuts the server down and waits for every request it is still
// answering. The observer runs after a response is written, so only after
// Close are its counts complete.
func (es *EngineServer) Close() {
	es.client.Transport.(*http.Transport).CloseIdleConnections()
	es.srv.Close()
}

// RunsOf reports how many times the handler has run for key.
func (es *EngineServer) RunsOf(key string) int {
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.runs[key]
}

// OutcomeCounts returns a copy of the observer's counts per outcome.
func (es *EngineServer) OutcomeCounts() map[idem.Outcome]int {
	es.mu.Lock()
	defer es.mu.Unlock()
	m := make(map[idem.Outcome]int, len(es.outcomes))
	for k, v := range es.outcomes {
		m[k] = v
	}
	return m
}

// Errors returns the errors of the events the observer saw, each wrapped
// with its outcome, status and time spent in the store.
func (es *EngineServer) Errors() []error {
	es.mu.Lock()
	defer es.mu.Unlock()
	return append([]error(nil), es.errs...)
}

// Answer is one HTTP response as the client read it.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Replayed reports whether the engine marked the answer as a replay.
func (a Answer) Replayed() bool { return a.Header.Get(problem.ReplayedHeader) == "true" }

// String shows the status, body, replay mark and Retry-After, which is what
// a failing test needs to tell answers apart.
func (a Answer) String() string {
	return fmt.Sprintf("%d %s (replayed %v, Retry-After %q)", a.Status, a.Body, a.Replayed(), a.Header.Get("Retry-After"))
}

// Post sends a JSON POST of body to path with key as its Idempotency-Key;
// extra is header name, value pairs. It is safe to call from any goroutine.
func (es *EngineServer) Post(path, key, body string, extra ...string) (Answer, error) {
	req, err := http.NewRequest(http.MethodPost, es.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := es.client.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("POST %s key %s: %w", path, key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("POST %s key %s: read body: %w", path, key, err)
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// MustPost is Post for the test's own goroutine: it fails the test when the
// request cannot be made.
func (es *EngineServer) MustPost(t *testing.T, path, key, body string, extra ...string) Answer {
	t.Helper()
	a, err := es.Post(path, key, body, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// problemName returns the last segment of a problem+json answer's type, or
// an error when the answer is not a complete RFC 9457 problem.
func problemName(a Answer) (string, error) {
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		return "", fmt.Errorf("Content-Type %q, want application/problem+json; answer %v", ct, a)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(a.Body, &p); err != nil {
		return "", fmt.Errorf("problem body %q: %w", a.Body, err)
	}
	if p.Status != a.Status || p.Title == "" || p.Detail == "" || p.Type == "" {
		return "", fmt.Errorf("incomplete problem %+v in a %d answer", p, a.Status)
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:], nil
}

// CheckProblem returns an error unless a is a complete problem+json answer
// with status whose type ends in name (one of the names of runtime/problem).
// When retryAfter is set the answer must carry a Retry-After of at most 2
// seconds (0 for a 409 request-in-progress whose handler answers in
// milliseconds, docs/semantics.md §3.5); when it is not, no Retry-After at
// all.
func CheckProblem(a Answer, status int, name string, retryAfter bool) error {
	if a.Status != status {
		return fmt.Errorf("answer %v, want %d %s", a, status, name)
	}
	got, err := problemName(a)
	if err != nil {
		return err
	}
	if got != name {
		return fmt.Errorf("problem %q, want %q (answer %v)", got, name, a)
	}
	ra := a.Header.Get("Retry-After")
	switch {
	case retryAfter && ra != "0" && ra != "1" && ra != "2":
		return fmt.Errorf("%s with Retry-After %q, want 0, 1 or 2", name, ra)
	case !retryAfter && ra != "":
		return fmt.Errorf("%s with Retry-After %q, want none", name, ra)
	}
	return nil
}

// CheckReplay returns an error unless a replays orig: marked
// Idempotent-Replayed, with the same status, Content-Type and Location and a
// byte-identical body.
func CheckReplay(a, orig Answer) error {
	switch {
	case !a.Replayed():
		return fmt.Errorf("answer %v is not marked %s", a, problem.ReplayedHeader)
	case a.Status != orig.Status:
		return fmt.Errorf("replay status %d, want %d", a.Status, orig.Status)
	case !bytes.Equal(a.Body, orig.Body):
		return fmt.Errorf("replay body %q, want the original %q", a.Body, orig.Body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if a.Header.Get(h) != orig.Header.Get(h) {
			return fmt.Errorf("replayed %s %q, want %q", h, a.Header.Get(h), orig.Header.Get(h))
		}
	}
	return nil
}

// Created answers 201 with a Location and a JSON body that no other
// execution can produce, so that a replay is recognised by its bytes. A test
// handler calls it with the request's key.
func Created(w http.ResponseWriter, key string) {
	id := "tr_" + rand.Text()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/transfers/"+id)
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"id":%q,"key":%q}`, id, key)
}

// DuplicateStorm sends, for each of keys keys, one POST /transfers from
// each of goroutines goroutines, then closes es. All goroutines walk the
// keys in the same shuffled order from a common start, so each key meets
// its duplicates at about the same moment: one claim wins, the rest meet it
// in flight or completed.
//
// It fails the test unless every key ran its handler exactly once, every
// other answer is a 409 request-in-progress with a short Retry-After or a
// byte-identical replay, at least one request met a key in flight, and the
// observer counted the same executions, replays and conflicts with no
// errors. The server's handler should answer with Created.
func DuplicateStorm(t *testing.T, es *EngineServer, goroutines, keys int) {
	t.Helper()
	order := mrand.Perm(keys)
	answers := make([][]Answer, keys)
	for k := range answers {
		answers[k] = make([]Answer, 0, goroutines)
	}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, goroutines)
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, k := range order {
				a, err := es.Post("/transfers", "key-"+strconv.Itoa(k), `{"amount":100,"to":"acc_`+strconv.Itoa(k)+`"}`)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				answers[k] = append(answers[k], a)
				mu.Unlock()
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	es.Close()

	var executed, replays, inFlight, bad int
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		if n := es.RunsOf(key); n != 1 {
			t.Errorf("%s: handler ran %d times, want exactly 1", key, n)
		}
		var orig *Answer
		for i, a := range answers[k] {
			if a.Status == http.StatusCreated && !a.Replayed() {
				if orig != nil {
					t.Errorf("%s: two executed answers: %v and %v", key, *orig, a)
				}
				orig = &answers[k][i]
			}
		}
		if orig == nil {
			t.Errorf("%s: no answer came from an execution", key)
			continue
		}
		executed++
		for i, a := range answers[k] {
			switch {
			case &answers[k][i] == orig:
			case a.Status == http.StatusConflict:
				if err := CheckProblem(a, http.StatusConflict, problem.InProgress, true); err != nil {
					bad++
					t.Errorf("%s: %v", key, err)
				}
				inFlight++
			default:
				if err := CheckReplay(a, *orig); err != nil {
					bad++
					t.Errorf("%s: %v", key, err)
				}
				replays++
			}
		}
		if bad > 10 {
			t.Fatal("too many wrong answers; stopping")
		}
	}
	total := goroutines * keys
	t.Logf("%d requests in %v (%.0f/s): %d executed, %d replayed, %d in progress",
		total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), executed, replays, inFlight)
	if executed+replays+inFlight != total {
		t.Errorf("classified %d answers, sent %d", executed+replays+inFlight, total)
	}
	if inFlight == 0 {
		t.Errorf("no request met a key in flight: the duplicates did not race")
	}

	// The observer saw the same story as the clients.
	got := es.OutcomeCounts()
	for _, err := range es.Errors() {
		t.Errorf("observer: %v", err)
	}
	want := map[idem.Outcome]int{idem.OutcomeExecuted: keys, idem.OutcomeReplayed: replays, idem.OutcomeInFlight: inFlight}
	for o, n := range got {
		if want[o] != n {
			t.Errorf("observer counted %d %q, want %d (all outcomes: %v)", n, o, want[o], got)
		}
	}
	for o, n := range want {
		if n > 0 && got[o] == 0 {
			t.Errorf("observer counted no %q, want %d", o, n)
		}
	}
	if got[idem.OutcomeReplayed]+got[idem.OutcomeInFlight] != total-keys {
		t.Errorf("observer: replayed %d + in flight %d != %d", got[idem.OutcomeReplayed], got[idem.OutcomeInFlight], total-keys)
	}
}

// LostCompletion checks what follows a completion lost after the handler
// of key ran at claimed, under a fail-closed policy with lease: while the
// lease runs, retries meet the key in flight (503s while the store
// reconnects are allowed and run nothing); after it, the outcome is
// unknown for good; the handler ran once. unavailable is the count of 503s
// the test saw before; the observer must count each of them, and the lost
// completion, as store errors.
func LostCompletion(t *testing.T, es *EngineServer, key, body string, claimed time.Time, lease time.Duration, unavailable int) {
	t.Helper()
	var inFlight bool
	for !inFlight && time.Since(claimed) < lease-500*time.Millisecond {
		a := es.MustPost(t, "/transfers", key, body)
		switch a.Status {
		case http.StatusServiceUnavailable:
			if err := CheckProblem(a, http.StatusServiceUnavailable, problem.StoreUnavailable, true); err != nil {
				t.Fatal(err)
			}
			unavailable++
			time.Sleep(50 * time.Millisecond)
		default:
			if err := CheckProblem(a, http.StatusConflict, problem.InProgress, true); err != nil {
				t.Fatalf("retry during the lease: %v", err)
			}
			inFlight = true
		}
	}
	if !inFlight {
		t.Fatalf("no retry reached the store within the lease")
	}
	time.Sleep(time.Until(claimed.Add(lease + 200*time.Millisecond)))
	for range 2 {
		a := es.MustPost(t, "/transfers", key, body)
		if err := CheckProblem(a, http.StatusConflict, problem.OutcomeUnknown, false); err != nil {
			t.Errorf("retry after the lease: %v", err)
		}
	}
	if n := es.RunsOf(key); n != 1 {
		t.Errorf("%s: handler ran %d times, want 1", key, n)
	}
	es.Close()
	got := es.OutcomeCounts()
	t.Logf("observer: %v", got)
	if got[idem.OutcomeStoreError] != unavailable+1 {
		t.Errorf("observer counted %d store errors, want %d (503s) + 1 (lost completion)", got[idem.OutcomeStoreError], unavailable)
	}
	if got[idem.OutcomeIndeterminate] != 2 {
		t.Errorf("observer counted %d indeterminate, want 2", got[idem.OutcomeIndeterminate])
	}
}
