package sqlitestore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The tests in this file drive the whole engine (idem.Engine) over real
// HTTP on loopback, with sqlitestore on a SQLite file behind it. The HTTP
// harness is the same as the one of the pgstore engine tests.

// enginePolicy is a POST policy on path with a required header key and a
// whole-body fingerprint.
func enginePolicy(id, path string, lease time.Duration, mode idem.LeaseExpiry, transactional bool) idem.Policy {
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

// engineServer is an engine mounted on an HTTP server, with the handler's
// runs counted per key and the observer's outcomes counted per outcome.
type engineServer struct {
	srv    *httptest.Server
	client *http.Client

	mu       sync.Mutex
	runs     map[string]int
	outcomes map[idem.Outcome]int
	errs     []error // the errors behind store-error, fenced and panicked outcomes
}

func serveEngine(t *testing.T, store idem.Store, handler http.Handler, policies ...idem.Policy) *engineServer {
	t.Helper()
	es := &engineServer{runs: make(map[string]int), outcomes: make(map[idem.Outcome]int)}
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

// close waits for every request the server is still answering, so that the
// observer has seen them all (it runs after the response is written).
func (es *engineServer) close() {
	es.client.Transport.(*http.Transport).CloseIdleConnections()
	es.srv.Close()
}

func (es *engineServer) runsOf(key string) int {
	es.mu.Lock()
	defer es.mu.Unlock()
	return es.runs[key]
}

func (es *engineServer) outcomeCounts() map[idem.Outcome]int {
	es.mu.Lock()
	defer es.mu.Unlock()
	m := make(map[idem.Outcome]int, len(es.outcomes))
	for k, v := range es.outcomes {
		m[k] = v
	}
	return m
}

func (es *engineServer) errors() []error {
	es.mu.Lock()
	defer es.mu.Unlock()
	return append([]error(nil), es.errs...)
}

// answer is one HTTP response as the client read it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

func (a answer) String() string {
	return fmt.Sprintf("%d %s (replayed %v, Retry-After %q)", a.status, a.body, a.replayed(), a.header.Get("Retry-After"))
}

// post sends a POST with key and body; extra is header name, value pairs.
func (es *engineServer) post(path, key, body string, extra ...string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, es.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := es.client.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("POST %s key %s: %w", path, key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("POST %s key %s: read body: %w", path, key, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// mustPost is post for the test goroutine.
func (es *engineServer) mustPost(t *testing.T, path, key, body string, extra ...string) answer {
	t.Helper()
	a, err := es.post(path, key, body, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// problemName returns the last segment of a problem+json answer's type, or
// an error when the answer is not a complete RFC 9457 problem.
func problemName(a answer) (string, error) {
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		return "", fmt.Errorf("Content-Type %q, want application/problem+json; answer %v", ct, a)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		return "", fmt.Errorf("problem body %q: %w", a.body, err)
	}
	if p.Status != a.status || p.Title == "" || p.Detail == "" || p.Type == "" {
		return "", fmt.Errorf("incomplete problem %+v in a %d answer", p, a.status)
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:], nil
}

// checkProblem reports whether a is the problem name with status, and when
// retryAfter is set, a Retry-After of 1 or 2 seconds; when it is not set, no
// Retry-After at all.
func checkProblem(a answer, status int, name string, retryAfter bool) error {
	if a.status != status {
		return fmt.Errorf("answer %v, want %d %s", a, status, name)
	}
	got, err := problemName(a)
	if err != nil {
		return err
	}
	if got != name {
		return fmt.Errorf("problem %q, want %q (answer %v)", got, name, a)
	}
	ra := a.header.Get("Retry-After")
	switch {
	case retryAfter && ra != "1" && ra != "2":
		return fmt.Errorf("%s with Retry-After %q, want 1 or 2", name, ra)
	case !retryAfter && ra != "":
		return fmt.Errorf("%s with Retry-After %q, want none", name, ra)
	}
	return nil
}

// checkReplay reports whether a replays orig: same status, Content-Type,
// Location and byte-identical body, marked Idempotent-Replayed.
func checkReplay(a, orig answer) error {
	switch {
	case !a.replayed():
		return fmt.Errorf("answer %v is not marked Idempotent-Replayed", a)
	case a.status != orig.status:
		return fmt.Errorf("replay status %d, want %d", a.status, orig.status)
	case !bytes.Equal(a.body, orig.body):
		return fmt.Errorf("replay body %q, want the original %q", a.body, orig.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if a.header.Get(h) != orig.header.Get(h) {
			return fmt.Errorf("replayed %s %q, want %q", h, a.header.Get(h), orig.header.Get(h))
		}
	}
	return nil
}

// created answers 201 with a body that no other execution can produce, so
// that a replay is recognised by its bytes.
func created(w http.ResponseWriter, key string) {
	id := "tr_" + rand.Text()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/transfers/"+id)
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"id":%q,"key":%q}`, id, key)
}

// duplicateStorm sends, for each of keys keys, one request from each of
// goroutines goroutines. All goroutines walk the keys in the same shuffled
// order from a common start, so each key meets its duplicates at about
// the same moment: one claim wins, the rest meet it in flight or completed.
// It checks every answer and the observer's counts.
func duplicateStorm(t *testing.T, es *engineServer, goroutines, keys int) {
	t.Helper()
	order := mrand.Perm(keys)
	answers := make([][]answer, keys)
	for k := range answers {
		answers[k] = make([]answer, 0, goroutines)
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
				a, err := es.post("/transfers", "key-"+strconv.Itoa(k), `{"amount":100,"to":"acc_`+strconv.Itoa(k)+`"}`)
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
	es.close()

	var executed, replays, inFlight, bad int
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		if n := es.runsOf(key); n != 1 {
			t.Errorf("%s: handler ran %d times, want exactly 1", key, n)
		}
		var orig *answer
		for i, a := range answers[k] {
			if a.status == http.StatusCreated && !a.replayed() {
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
			case a.status == http.StatusConflict:
				if err := checkProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
					bad++
					t.Errorf("%s: %v", key, err)
				}
				inFlight++
			default:
				if err := checkReplay(a, *orig); err != nil {
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
	got := es.outcomeCounts()
	for _, err := range es.errors() {
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

// Proof: concurrent duplicates through the engine on SQLite: 64 concurrent
// duplicates of each of 200 requests. Every key runs its handler exactly
// once; every other answer is a 409 request-in-progress with a short
// Retry-After or a byte-identical replay; the observer agrees, which also
// means no completion failed: under this storm a completion once lost
// SQLite's write lock to new claims until it timed out (see Store.write).
func TestEngineConcurrentDuplicates(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond)
		created(w, r.Header.Get("Idempotency-Key"))
	})
	es := serveEngine(t, openStore(t), handler, enginePolicy("createTransfer", "/transfers", time.Minute, idem.FailClosed, false))
	duplicateStorm(t, es, 64, 200)
}

// Proof: transactional mode through the engine on SQLite. The handler's
// business write and the key's completion commit together or not at all.
func TestEngineTransactional(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE effects (marker TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const slowLease = 300 * time.Millisecond
	handler := idem.TxHandler[*sql.Tx]("createPayment", func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) {
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO effects (marker) VALUES (?)`, key); err != nil {
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
			time.Sleep(5 * slowLease)
		default:
			time.Sleep(20 * time.Millisecond)
		}
		created(w, key)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /payments", handler)
	mux.Handle("POST /slow-payments", handler)
	es := serveEngine(t, s, mux,
		enginePolicy("createPayment", "/payments", time.Minute, idem.Takeover, true),
		enginePolicy("createSlowPayment", "/slow-payments", slowLease, idem.Takeover, true))
	effects := func(key string) int {
		t.Helper()
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE marker = ?`, key).Scan(&n); err != nil {
			t.Fatalf("count effects: %v", err)
		}
		return n
	}
	const body = `{"amount":2500,"currency":"EUR"}`

	t.Run("16 concurrent duplicates", func(t *testing.T) {
		const n = 16
		answers := make([]answer, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[i], errs[i] = es.post("/payments", "dup", body)
			}()
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var orig *answer
		for i, a := range answers {
			if a.status == http.StatusCreated && !a.replayed() {
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
			case a.status == http.StatusConflict:
				conflicts++
				if err := checkProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
					t.Error(err)
				}
			default:
				replays++
				if err := checkReplay(a, *orig); err != nil {
					t.Error(err)
				}
			}
		}
		t.Logf("16 duplicates: 1 executed, %d in progress, %d replayed", conflicts, replays)
		if err := checkReplay(es.mustPost(t, "/payments", "dup", body), *orig); err != nil {
			t.Errorf("retry after the storm: %v", err)
		}
		if got := effects("dup"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
		if got := es.runsOf("dup"); got != 1 {
			t.Errorf("handler ran %d times, want 1", got)
		}
	})

	t.Run("503 rolls back and releases", func(t *testing.T) {
		a := es.mustPost(t, "/payments", "unavail", body, "X-Mode", "unavailable")
		if a.status != http.StatusServiceUnavailable || a.replayed() {
			t.Fatalf("first attempt: %v, want the handler's own 503", a)
		}
		if got := effects("unavail"); got != 0 {
			t.Fatalf("effects after a 503 = %d, want 0 (rolled back)", got)
		}
		retry := es.mustPost(t, "/payments", "unavail", body)
		if retry.status != http.StatusCreated || retry.replayed() {
			t.Fatalf("retry: %v, want a fresh 201", retry)
		}
		if err := checkReplay(es.mustPost(t, "/payments", "unavail", body), retry); err != nil {
			t.Error(err)
		}
		if got := effects("unavail"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
	})

	t.Run("panic rolls back and releases", func(t *testing.T) {
		a := es.mustPost(t, "/payments", "boom", body, "X-Mode", "panic")
		if err := checkProblem(a, http.StatusInternalServerError, idem.ProblemHandlerFailed, false); err != nil {
			t.Fatal(err)
		}
		if got := effects("boom"); got != 0 {
			t.Fatalf("effects after a panic = %d, want 0 (rolled back)", got)
		}
		retry := es.mustPost(t, "/payments", "boom", body)
		if retry.status != http.StatusCreated || retry.replayed() {
			t.Fatalf("retry after the panic: %v, want a fresh 201", retry)
		}
		if got := effects("boom"); got != 1 {
			t.Errorf("effects = %d, want exactly 1", got)
		}
	})

	// The store rolls back the transaction of a handler that runs past its
	// lease; a retry takes the key over and runs once; the late request's
	// commit is fenced and it answers 409 request-in-progress.
	t.Run("handler outlives its lease", func(t *testing.T) {
		type result struct {
			a   answer
			err error
		}
		slow := make(chan result, 1)
		began := time.Now()
		go func() {
			a, err := es.post("/slow-payments", "sleepy", body, "X-Mode", "sleep")
			slow <- result{a, err}
		}()
		var fresh *answer
		time.Sleep(slowLease / 3)
		for fresh == nil && time.Since(began) < 10*time.Second {
			sent := time.Since(began)
			a := es.mustPost(t, "/slow-payments", "sleepy", body)
			switch {
			case a.status == http.StatusCreated && !a.replayed():
				if time.Since(began) < slowLease {
					t.Fatalf("retry ran before the first claim's lease ended: %v", a)
				}
				fresh = &a
			case a.status == http.StatusCreated:
				t.Fatalf("retry replayed %v before any retry ran: the stale handler's answer was stored", a)
			default:
				if err := checkProblem(a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
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
		if err := checkProblem(r.a, http.StatusConflict, idem.ProblemInProgress, true); err != nil {
			t.Errorf("the request that outlived its lease: %v", err)
		}
		if err := checkReplay(es.mustPost(t, "/slow-payments", "sleepy", body), *fresh); err != nil {
			t.Errorf("retry after both ended: %v", err)
		}
		if got := effects("sleepy"); got != 1 {
			t.Errorf("effects = %d, want exactly 1 (the stale write rolled back)", got)
		}
		if got := es.runsOf("sleepy"); got != 2 {
			t.Errorf("handler ran %d times, want 2", got)
		}
	})
}
