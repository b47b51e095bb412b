package storetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// What follows is a harness for a store's own engine tests: it mounts an
// idem.Engine on a loopback HTTP server in front of the store, so that a
// test can drive the whole engine the way a client does and check the
// answers and the observer's counts.

// EnginePolicy returns a POST policy on path, scoped to the operation, with
// a required Idempotency-Key header, a whole-body fingerprint and a TTL of
// an hour.
func EnginePolicy(id, path string, lease time.Duration, mode idem.LeaseExpiry, transactional bool) idem.Policy {
	return idem.Policy{
		OperationID:      id,
		Method:           http.MethodPost,
		Path:             path,
		Scope:            idem.ScopeOperation,
		Key:              idem.KeySource{In: idem.KeyInHeader, Name: "Idempotency-Key"},
		KeyMaxLength:     255,
		Required:         true,
		TTL:              time.Hour,
		Lease:            lease,
		MaxSnapshotBytes: 64 << 10,
		OnLeaseExpiry:    mode,
		Transactional:    transactional,
	}
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
func ServeEngine(t *testing.T, store idem.Store, handler http.Handler, policies ...idem.Policy) *EngineServer {
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
func (a Answer) Replayed() bool { return a.Header.Get("Idempotent-Replayed") == "true" }

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
// with status whose type ends in name (one of the idem.Problem constants).
// When retryAfter is set the answer must carry a Retry-After of 1 or 2
// seconds; when it is not, no Retry-After at all.
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
	case retryAfter && ra != "1" && ra != "2":
		return fmt.Errorf("%s with Retry-After %q, want 1 or 2", name, ra)
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
		return fmt.Errorf("answer %v is not marked Idempotent-Replayed", a)
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
				if err := CheckProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
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

// EngineTx runs the engine's transactional scenarios against store:
// concurrent duplicates, a handler's 503 and a handler's panic (both roll
// back its write and release the key), a handler that outlives its lease
// (its write is rolled back, its commit fenced, and a retry runs once),
// and a handler that writes around its transaction (durable mode: its
// writes never wait for its own request, and a crash fails closed). The
// handlers behind the engine are idem.TxHandler[Tx] and a plain handler
// that takes its transaction with idem.TxFrom[Tx], so the store's
// Tx.Driver must return a Tx.
//
// write performs the handler's business write recording marker inside tx;
// count reports how many committed business writes record marker.
func EngineTx[Tx any](t *testing.T, store idem.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error,
	count func(ctx context.Context, marker string) (int, error)) {
	t.Helper()
	const slowLease = 300 * time.Millisecond
	pay := func(w http.ResponseWriter, r *http.Request, tx Tx) {
		key := r.Header.Get("Idempotency-Key")
		if err := write(r.Context(), tx, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch r.Header.Get("X-Mode") {
		case "unavailable":
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		case "panic":
			panic("handler failed after its write")
		case "sleep":
			// Idle inside the transaction well past the lease.
			time.Sleep(5 * slowLease)
		default:
			time.Sleep(20 * time.Millisecond)
		}
		Created(w, key)
	}
	// Each route's adapter names its own operation: a TxHandler refuses a
	// request the engine protected as another one.
	mux := http.NewServeMux()
	mux.Handle("POST /payments", idem.TxHandler("createPayment", pay))
	mux.Handle("POST /slow-payments", idem.TxHandler("createSlowPayment", pay))
	mux.HandleFunc("POST /loose-payments", func(w http.ResponseWriter, r *http.Request) {
		looseHandler(w, r, store, write)
	})
	es := ServeEngine(t, store, mux,
		EnginePolicy("createPayment", "/payments", time.Minute, idem.Takeover, true),
		EnginePolicy("createSlowPayment", "/slow-payments", slowLease, idem.Takeover, true),
		EnginePolicy("createLoosePayment", "/loose-payments", time.Minute, idem.Takeover, true))
	ctx := context.Background()
	effects := func(key string) int {
		t.Helper()
		n, err := count(ctx, key)
		if err != nil {
			t.Fatalf("count effects: %v", err)
		}
		return n
	}
	const body = `{"amount":2500,"currency":"EUR"}`

	t.Run("16 concurrent duplicates", func(t *testing.T) {
		const n = 16
		answers := make([]Answer, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[i], errs[i] = es.Post("/payments", "dup", body)
			}()
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var orig *Answer
		for i, a := range answers {
			if a.Status == http.StatusCreated && !a.Replayed() {
				if orig != nil {
					t.Fatalf("two executed answers: %v and %v", *orig, a)
				}
				orig = &answers[i]
			}
		}
		if orig == nil {
			t.Fatalf("no executed answer among %v", answers)
		}
		var conflicts, replays int
		for i, a := range answers {
			switch {
			case &answers[i] == orig:
			case a.Status == http.StatusConflict:
				conflicts++
				if err := CheckProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
					t.Error(err)
				}
			default:
				replays++
				if err := CheckReplay(a, *orig); err != nil {
					t.Error(err)
				}
			}
		}
		t.Logf("16 duplicates: 1 executed, %d in progress, %d replayed", conflicts, replays)
		if err := CheckReplay(es.MustPost(t, "/payments", "dup", body), *orig); err != nil {
			t.Errorf("retry after the storm: %v", err)
		}
		if got := effects("dup"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
		if got := es.RunsOf("dup"); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})

	t.Run("503 rolls back and releases", func(t *testing.T) {
		a := es.MustPost(t, "/payments", "unavail", body, "X-Mode", "unavailable")
		if a.Status != http.StatusServiceUnavailable || a.Replayed() {
			t.Fatalf("first attempt: %v, want the handler's own 503", a)
		}
		if got := effects("unavail"); got != 0 {
			t.Fatalf("effects after a 503 = %d, want 0 (rolled back)", got)
		}
		retry := es.MustPost(t, "/payments", "unavail", body)
		if retry.Status != http.StatusCreated || retry.Replayed() {
			t.Fatalf("retry: %v, want a fresh 201", retry)
		}
		if err := CheckReplay(es.MustPost(t, "/payments", "unavail", body), retry); err != nil {
			t.Error(err)
		}
		if got := effects("unavail"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
		if got := es.RunsOf("unavail"); got != 2 {
			t.Errorf("handler ran %d times, want 2 (the 503 and the retry)", got)
		}
	})

	t.Run("panic rolls back and releases", func(t *testing.T) {
		a := es.MustPost(t, "/payments", "boom", body, "X-Mode", "panic")
		if err := CheckProblem(a, http.StatusInternalServerError, idem.ProblemHandlerFailed, false); err != nil {
			t.Fatal(err)
		}
		if got := effects("boom"); got != 0 {
			t.Fatalf("effects after a panic = %d, want 0 (rolled back)", got)
		}
		retry := es.MustPost(t, "/payments", "boom", body)
		if retry.Status != http.StatusCreated || retry.Replayed() {
			t.Fatalf("retry after the panic: %v, want a fresh 201", retry)
		}
		if got := effects("boom"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
	})

	// The store ends the transaction of a handler that idles past its
	// lease. That request answers 409 request-in-progress (its commit is
	// fenced, so its own 201 is discarded); its write is gone; a retry
	// takes the key over, runs once, and its answer is what every later
	// retry replays.
	t.Run("handler outlives its lease", func(t *testing.T) {
		type result struct {
			a   Answer
			err error
		}
		slow := make(chan result, 1)
		began := time.Now()
		go func() {
			a, err := es.Post("/slow-payments", "sleepy", body, "X-Mode", "sleep")
			slow <- result{a, err}
		}()
		// While the lease runs, a retry meets the claim in flight. After
		// it, the key is free again, while the first handler still sleeps.
		var fresh *Answer
		time.Sleep(slowLease / 3)
		for fresh == nil && time.Since(began) < 10*time.Second {
			sent := time.Since(began)
			a := es.MustPost(t, "/slow-payments", "sleepy", body)
			switch {
			case a.Status == http.StatusCreated && !a.Replayed():
				if time.Since(began) < slowLease {
					t.Fatalf("retry ran before the first claim's lease ended: %v", a)
				}
				fresh = &a
			case a.Status == http.StatusCreated:
				t.Fatalf("retry replayed %v before any retry ran: the stale handler's answer was stored", a)
			default:
				if err := CheckProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
					t.Fatalf("retry sent %v after the first claim: %v", sent.Round(time.Millisecond), err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if fresh == nil {
			t.Fatal("no retry ran within 10s")
		}
		t.Logf("retry ran %v after the first claim (lease %v)", time.Since(began).Round(time.Millisecond), slowLease)
		r := <-slow
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := CheckProblem(r.a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
			t.Errorf("the request that outlived its lease: %v", err)
		}
		if err := CheckReplay(es.MustPost(t, "/slow-payments", "sleepy", body), *fresh); err != nil {
			t.Errorf("retry after both ended: %v", err)
		}
		if got := effects("sleepy"); got != 1 {
			t.Errorf("effects = %d, want exactly 1 (the stale write rolled back)", got)
		}
		if got := es.RunsOf("sleepy"); got != 2 {
			t.Errorf("handler ran %d times, want 2", got)
		}
	})

	// A handler mounted as a plain http.Handler writes around its
	// transaction. Its first request, which writes nothing, tells the
	// engine so; from then on each claim commits before the handler runs
	// and fails closed, and the handler's transaction begins only when the
	// handler asks for it. One begun up front would hold what the store's
	// Begin takes (on SQLite the database's only write lock), and a write
	// the handler makes on a connection of its own would wait for its own
	// request until the store gave up.
	t.Run("durable mode", func(t *testing.T) {
		flag := es.MustPost(t, "/loose-payments", "flag", body, "X-Mode", "idle")
		if flag.Status != http.StatusCreated {
			t.Fatalf("the request that shows the handler does not take its transaction: %v", flag)
		}
		for _, mode := range []string{"own", "tx"} {
			key := "durable-" + mode
			a := es.MustPost(t, "/loose-payments", key, body, "X-Mode", mode)
			if a.Status != http.StatusCreated || a.Replayed() {
				t.Fatalf("%s: %v, want a fresh 201", key, a)
			}
			if err := CheckReplay(es.MustPost(t, "/loose-payments", key, body, "X-Mode", mode), a); err != nil {
				t.Errorf("%s: retry: %v", key, err)
			}
			if got := effects(key); got != 1 {
				t.Errorf("%s: effects = %d, want exactly 1", key, got)
			}
			if got := es.RunsOf(key); got != 1 {
				t.Errorf("%s: handler ran %d times, want 1", key, got)
			}
		}
		// A handler that dies after writing on its own connection leaves
		// the key indeterminate, never free for a retry that writes again.
		a := es.MustPost(t, "/loose-payments", "durable-crash", body, "X-Mode", "own-panic")
		if err := CheckProblem(a, http.StatusInternalServerError, idem.ProblemHandlerFailed, false); err != nil {
			t.Fatal(err)
		}
		retry := es.MustPost(t, "/loose-payments", "durable-crash", body, "X-Mode", "own")
		if err := CheckProblem(retry, http.StatusConflict, idem.ProblemOutcomeUnknown, false); err != nil {
			t.Errorf("retry after the crash: %v", err)
		}
		if got := effects("durable-crash"); got != 1 {
			t.Errorf("effects after the crash and its retry = %d, want 1", got)
		}
	})

	t.Run("durable mode after a restart", func(t *testing.T) {
		durableAfterRestart(t, store, write, effects)
	})
}

// durableAfterRestart: a durable-mode request writes around its
// transaction and its process dies before it answers (here its handler
// hangs past the lease, which the store cannot tell apart). Durable mode
// lives in the process that saw the handler write around its transaction;
// the process that meets the retry, restarted or another replica, has not
// seen it and claims in a transaction with takeover. The key must still
// fail closed, or the retry writes a second time.
func durableAfterRestart[Tx any](t *testing.T, store idem.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error, effects func(key string) int) {
	const lease = 300 * time.Millisecond
	const body = `{"amount":2500,"currency":"EUR"}`
	hung := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Mode") != "own-hang" {
			looseHandler(w, r, store, write)
			return
		}
		if err := writeOwn(r.Context(), store, write, r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		<-hung
		Created(w, r.Header.Get("Idempotency-Key"))
	})
	policy := EnginePolicy("createLatePayment", "/late-payments", lease, idem.Takeover, true)
	before := ServeEngine(t, store, handler, policy)
	if a := before.MustPost(t, "/late-payments", "late-flag", body, "X-Mode", "idle"); a.Status != http.StatusCreated {
		t.Fatalf("the request that shows the handler does not take its transaction: %v", a)
	}
	dead := make(chan error, 1)
	go func() {
		_, err := before.Post("/late-payments", "late-crash", body, "X-Mode", "own-hang")
		dead <- err
	}()
	defer func() {
		close(hung)
		if err := <-dead; err != nil {
			t.Errorf("the hung request: %v", err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); effects("late-crash") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the durable-mode request made no write within 10s")
		}
	}
	time.Sleep(lease + 200*time.Millisecond)

	after := ServeEngine(t, store, handler, policy)
	retry := after.MustPost(t, "/late-payments", "late-crash", body, "X-Mode", "own")
	if err := CheckProblem(retry, http.StatusConflict, idem.ProblemOutcomeUnknown, false); err != nil {
		t.Errorf("retry in a process that has not seen durable mode: %v", err)
	}
	if got := effects("late-crash"); got != 1 {
		t.Errorf("effects after the retry = %d, want 1", got)
	}
}

// looseHandler is a transactional operation's handler mounted without its
// adapter, by its X-Mode: "idle" writes nothing, "own" writes in a
// transaction of its own from store's Begin, as a handler writing through
// its pool does, "own-panic" does so and then panics, and "tx" takes the
// request's transaction with idem.TxFrom and writes in it.
func looseHandler[Tx any](w http.ResponseWriter, r *http.Request, store idem.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error) {
	ctx, key := r.Context(), r.Header.Get("Idempotency-Key")
	var err error
	switch mode := r.Header.Get("X-Mode"); mode {
	case "own", "own-panic":
		err = writeOwn(ctx, store, write, key)
		if err == nil && mode == "own-panic" {
			panic("handler failed after its write")
		}
	case "tx":
		tx, ok := idem.TxFrom[Tx](ctx)
		if !ok {
			err = errors.New("no transaction")
			break
		}
		err = write(ctx, tx, key)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	Created(w, key)
}

// writeOwn writes marker in a transaction of its own, outside the
// request's.
func writeOwn[Tx any](ctx context.Context, store idem.Transactor,
	write func(ctx context.Context, tx Tx, marker string) error, marker string) error {
	own, err := store.Begin(ctx, longLease)
	if err != nil {
		return err
	}
	tx, ok := own.Driver().(Tx)
	if !ok {
		return errors.Join(fmt.Errorf("Driver() is %T", own.Driver()), own.Release(ctx))
	}
	if err := write(ctx, tx, marker); err != nil {
		return errors.Join(err, own.Release(ctx))
	}
	return own.Commit(ctx, idem.Response{})
}

// TwoProcesses starts two child processes made by command, which race to
// claim keys "key-0" … "key-<keys-1>" and print "WON <key>" for each claim
// they win, and checks that every key has exactly one winner across both.
func TwoProcesses(t *testing.T, keys int, command func() *exec.Cmd) {
	t.Helper()
	outs := make([]strings.Builder, 2)
	cmds := make([]*exec.Cmd, 2)
	for i := range cmds {
		cmds[i] = command()
		cmds[i].Stdout = &outs[i]
	}
	for i, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", i, err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i].String())
		}
	}
	winners := make(map[string][]int)
	for i := range outs {
		for line := range strings.Lines(outs[i].String()) {
			if key, ok := strings.CutPrefix(strings.TrimSpace(line), "WON "); ok {
				winners[key] = append(winners[key], i)
			}
		}
	}
	perProcess := [2]int{}
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		if len(winners[key]) != 1 {
			t.Errorf("%s won by processes %v, want exactly one", key, winners[key])
			continue
		}
		perProcess[winners[key][0]]++
	}
	if len(winners) != keys {
		t.Errorf("%d keys won, want %d", len(winners), keys)
	}
	t.Logf("keys won per process: %v", perProcess)
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
			if err := CheckProblem(a, http.StatusServiceUnavailable, idem.ProblemStoreUnavailable, true); err != nil {
				t.Fatal(err)
			}
			unavailable++
			time.Sleep(50 * time.Millisecond)
		default:
			if err := CheckProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
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
		if err := CheckProblem(a, http.StatusConflict, idem.ProblemOutcomeUnknown, false); err != nil {
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

// StartUntilReady starts cmd, a child process of a proof, and waits until it
// prints "ready", as a child does from inside its handler after its claim. It returns
// the time just before the start, which is before the claim, and the time
// it read "ready", which is after.
func StartUntilReady(t *testing.T, cmd *exec.Cmd) (began, readyAt time.Time) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
				break
			}
		}
		for sc.Scan() { // drain
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("child exited before it was ready")
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("child never got ready")
	}
	return began, time.Now()
}

// RaceChild is the child's half of TwoProcesses: it claims keys "key-0" …
// "key-<keys-1>" from 16 goroutines, each in its own random order, with
// claim(key, token), and prints "WON <key>" for each claim it won.
func RaceChild(t *testing.T, keys int, claim func(key, token string) (idem.Result, error)) {
	t.Helper()
	var (
		mu  sync.Mutex
		won []string
		wg  sync.WaitGroup
	)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range mrand.Perm(keys) {
				key := "key-" + strconv.Itoa(k)
				res, err := claim(key, fmt.Sprintf("tok-%d-%d-%d", os.Getpid(), g, k))
				if err != nil {
					t.Errorf("claim %s: %v", key, err)
					return
				}
				if res.Won {
					mu.Lock()
					won = append(won, key)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range won {
		fmt.Printf("WON %s\n", k)
	}
}
