package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/problem"
	"github.com/idemgen/idemgen/runtime/storetest"
)

func transferPolicy() idem.Policy {
	return idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
		p.ReplayHeaders = []string{"X-Request-Cost"}
		p.Fingerprint = fingerprint.Spec{Body: []fingerprint.Field{
			{Pointer: "/amount", Type: fingerprint.Integer},
			{Pointer: "/to", Type: fingerprint.String},
		}}
	})
}

func adoptionPolicy() idem.Policy {
	p := transferPolicy()
	p.OperationID, p.Path = "adoptPet", "/pets/{pet_id}/adoptions"
	p.Fingerprint = fingerprint.Spec{Path: []string{"pet_id"}}
	return p
}

// fixture is an engine over a memstore with a handler that counts its runs.
type fixture struct {
	t       *testing.T
	clock   *storetest.Clock
	store   *memstore.Store
	engine  *idem.Engine
	server  http.Handler
	runs    atomic.Int64
	handler http.HandlerFunc
	events  chan idem.Event
}

func newFixture(t *testing.T, policies ...idem.Policy) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), events: make(chan idem.Event, 100)}
	f.store = memstore.New(memstore.WithClock(f.clock.Now))
	f.handler = func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=abc")
		w.Header().Set("X-Trace-Id", "t-1")
		w.Header().Set("X-Request-Cost", "3")
		w.Header().Set("Location", "/transfers/tr_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"tr_1","echo":` + string(body) + `}`))
	}
	var err error
	f.engine, err = idem.New(idem.Config{
		Store:    f.store,
		Policies: policies,
		Tenant:   func(r *http.Request) (string, bool) { v := r.Header.Get("X-Tenant"); return v, v != "" },
		Observer: idem.ObserverFunc(func(_ context.Context, ev idem.Event) { f.events <- ev }),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.server = f.engine.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.runs.Add(1)
		f.handler(w, r)
	}))
	return f
}

type call struct {
	method, path, key, tenant, body, contentType string
}

func (f *fixture) do(c call) *httptest.ResponseRecorder {
	f.t.Helper()
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.path == "" {
		c.path = "/transfers"
	}
	if c.tenant == "" {
		c.tenant = "acme"
	}
	r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	if c.contentType == "" {
		c.contentType = "application/json"
	}
	r.Header.Set("Content-Type", c.contentType)
	r.Header.Set("X-Tenant", c.tenant)
	if c.key != "" {
		r.Header.Set("Idempotency-Key", c.key)
	}
	w := httptest.NewRecorder()
	f.server.ServeHTTP(w, r)
	return w
}

func problemType(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json; body %s", ct, w.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body: %v", err)
	}
	if p.Status != w.Code || p.Title == "" || p.Detail == "" {
		t.Fatalf("incomplete problem %+v for status %d", p, w.Code)
	}
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

func expect(t *testing.T, w *httptest.ResponseRecorder, status int, problem string) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if problem != "" {
		if got := problemType(t, w); got != problem {
			t.Fatalf("problem type = %q, want %q", got, problem)
		}
	}
}

const body = `{"amount": 1000, "to": "acc_2", "memo": "rent"}`

func TestReplayIsByteIdenticalAndFiltered(t *testing.T) {
	f := newFixture(t, transferPolicy())
	first := f.do(call{key: "k1", body: body})
	expect(t, first, http.StatusCreated, "")
	// Reformatted, reordered, another number spelling and a changed memo
	// (not fingerprinted): the same request.
	second := f.do(call{key: "k1", body: `{ "memo":"other", "to":"acc_2","amount":1e3 }`})
	expect(t, second, http.StatusCreated, "")
	if f.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", f.runs.Load())
	}
	if second.Body.String() != first.Body.String() {
		t.Fatalf("replayed body %q, want %q", second.Body, first.Body)
	}
	h := second.Header()
	if h.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay lacks Idempotent-Replayed: true")
	}
	if first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatal("first response is marked replayed")
	}
	for _, kept := range []string{"Content-Type", "Location", "X-Request-Cost"} {
		if h.Get(kept) != first.Header().Get(kept) {
			t.Errorf("replayed %s = %q, want %q", kept, h.Get(kept), first.Header().Get(kept))
		}
	}
	for _, dropped := range []string{"Set-Cookie", "X-Trace-Id"} {
		if h.Get(dropped) != "" {
			t.Errorf("replay carries %s", dropped)
		}
	}
}

func TestKeyRules(t *testing.T) {
	f := newFixture(t, transferPolicy())
	expect(t, f.do(call{body: body}), http.StatusBadRequest, problem.MissingKey)
	for _, k := range []string{"\"unterminated", "caf\u00e9", strings.Repeat("x", 256), "a b"} {
		expect(t, f.do(call{key: k, body: body}), http.StatusBadRequest, problem.InvalidKey)
	}
	if f.runs.Load() != 0 {
		t.Fatalf("handler ran %d times for refused keys", f.runs.Load())
	}
	// The structured-field string form names the same key.
	expect(t, f.do(call{key: "abc", body: body}), http.StatusCreated, "")
	w := f.do(call{key: `"abc"`, body: body})
	if w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("sf-string key did not replay the plain key; status %d", w.Code)
	}
}

func TestOptionalKeyPassesThrough(t *testing.T) {
	p := transferPolicy()
	p.Required = false
	f := newFixture(t, p)
	expect(t, f.do(call{body: body}), http.StatusCreated, "")
	expect(t, f.do(call{body: body}), http.StatusCreated, "")
	if f.runs.Load() != 2 || f.store.Len() != 0 {
		t.Fatalf("runs = %d, stored = %d; want 2 runs, nothing stored", f.runs.Load(), f.store.Len())
	}
}

func TestMismatchIs422WhateverTheState(t *testing.T) {
	f := newFixture(t, transferPolicy())
	expect(t, f.do(call{key: "k", body: body}), http.StatusCreated, "")
	expect(t, f.do(call{key: "k", body: `{"amount": 1001, "to": "acc_2"}`}), http.StatusUnprocessableEntity, problem.KeyReused)
	// A missing field differs from null.
	expect(t, f.do(call{key: "k", body: `{"amount": 1000, "to": "acc_2", "x": 1}`}), http.StatusCreated, "")
	expect(t, f.do(call{key: "k2", body: `{"amount": 1000}`}), http.StatusCreated, "")
	expect(t, f.do(call{key: "k2", body: `{"amount": 1000, "to": null}`}), http.StatusUnprocessableEntity, problem.KeyReused)
}

func TestPathParametersBelongToTheFingerprint(t *testing.T) {
	f := newFixture(t, adoptionPolicy())
	expect(t, f.do(call{path: "/pets/p1/adoptions", key: "k", body: `{}`}), http.StatusCreated, "")
	expect(t, f.do(call{path: "/pets/p2/adoptions", key: "k", body: `{}`}), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, f.do(call{path: "/pets/p1/adoptions", key: "k", body: `{}`}), http.StatusCreated, "")
	if f.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", f.runs.Load())
	}
}

func TestTenantsAndScopes(t *testing.T) {
	tenantScoped := transferPolicy()
	tenantScoped.Scope = idem.ScopeTenant
	other := adoptionPolicy()
	other.Scope = idem.ScopeTenant
	f := newFixture(t, tenantScoped, other)
	expect(t, f.do(call{key: "k", body: body}), http.StatusCreated, "")
	expect(t, f.do(call{key: "k", body: body, tenant: "globex"}), http.StatusCreated, "")
	if f.runs.Load() != 2 {
		t.Fatalf("tenants share keys: %d runs, want 2", f.runs.Load())
	}
	expect(t, f.do(call{path: "/pets/p1/adoptions", key: "k", body: `{}`}), http.StatusUnprocessableEntity, problem.KeyReused)
}

func TestInFlightIs409WithRetryAfter(t *testing.T) {
	f := newFixture(t, transferPolicy())
	entered, release := make(chan struct{}), make(chan struct{})
	inner := f.handler
	f.handler = func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		inner(w, r)
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.do(call{key: "k", body: body}) }()
	<-entered
	w := f.do(call{key: "k", body: body})
	expect(t, w, http.StatusConflict, problem.InProgress)
	if ra := w.Header().Get("Retry-After"); ra != "1" && ra != "2" {
		t.Fatalf("Retry-After = %q, want a short hint of 1 or 2 seconds", ra)
	}
	close(release)
	expect(t, <-done, http.StatusCreated, "")
}

func TestUnstoredStatusesReleaseTheClaim(t *testing.T) {
	for _, status := range []int{401, 403, 408, 425, 429, 500, 502, 503, 504} {
		f := newFixture(t, transferPolicy())
		f.handler = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }
		f.do(call{key: "k", body: body})
		f.do(call{key: "k", body: body})
		if f.runs.Load() != 2 {
			t.Errorf("status %d: handler ran %d times, want 2 (never stored)", status, f.runs.Load())
		}
	}
	for _, status := range []int{200, 201, 302, 400, 402, 404, 409, 422} {
		f := newFixture(t, transferPolicy())
		f.handler = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }
		f.do(call{key: "k", body: body})
		if w := f.do(call{key: "k", body: body}); w.Code != status || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("status %d: second answer %d replayed=%q, want a replay", status, w.Code, w.Header().Get("Idempotent-Replayed"))
		}
	}
	p := transferPolicy()
	p.CacheServerErrors = true
	f := newFixture(t, p)
	f.handler = func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }
	f.do(call{key: "k", body: body})
	if w := f.do(call{key: "k", body: body}); w.Code != 500 || f.runs.Load() != 1 {
		t.Fatalf("cacheServerErrors: status %d after %d runs, want a replayed 500", w.Code, f.runs.Load())
	}
}

func TestOversizedResponseIsSentButNotReplayed(t *testing.T) {
	f := newFixture(t, transferPolicy())
	big := strings.Repeat("x", 5000)
	f.handler = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, big[:1000])
		_, _ = io.WriteString(w, big[1000:])
	}
	w := f.do(call{key: "k", body: body})
	if w.Code != http.StatusCreated || w.Body.String() != big {
		t.Fatalf("original: status %d, %d bytes; want 201 with %d bytes", w.Code, w.Body.Len(), len(big))
	}
	w = f.do(call{key: "k", body: body})
	expect(t, w, http.StatusConflict, problem.NotReplayable)
	if !strings.Contains(w.Body.String(), "201") {
		t.Fatalf("not-replayable problem does not name the original status: %s", w.Body)
	}
	if f.runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", f.runs.Load())
	}
}

func TestPanicAbandonsTheClaim(t *testing.T) {
	for _, mode := range []idemstore.LeaseExpiry{idemstore.FailClosed, idemstore.Takeover} {
		p := transferPolicy()
		p.OnLeaseExpiry = mode
		f := newFixture(t, p)
		inner := f.handler
		f.handler = func(w http.ResponseWriter, r *http.Request) {
			if f.runs.Load() == 1 {
				panic("boom")
			}
			inner(w, r)
		}
		expect(t, f.do(call{key: "k", body: body}), http.StatusInternalServerError, problem.HandlerFailed)
		w := f.do(call{key: "k", body: body})
		if mode == idemstore.FailClosed {
			expect(t, w, http.StatusConflict, problem.OutcomeUnknown)
			if w.Header().Get("Retry-After") != "" {
				t.Fatal("outcome-unknown carries Retry-After")
			}
		} else {
			expect(t, w, http.StatusCreated, "")
		}
	}
}

func TestLeaseExpiry(t *testing.T) {
	for _, mode := range []idemstore.LeaseExpiry{idemstore.FailClosed, idemstore.Takeover} {
		p := transferPolicy()
		p.OnLeaseExpiry = mode
		f := newFixture(t, p)
		entered, release := make(chan struct{}), make(chan struct{})
		inner := f.handler
		f.handler = func(w http.ResponseWriter, r *http.Request) {
			if f.runs.Load() == 1 {
				close(entered)
				<-release
			}
			inner(w, r)
		}
		stale := make(chan *httptest.ResponseRecorder)
		go func() { stale <- f.do(call{key: "k", body: body}) }()
		<-entered
		f.clock.Advance(p.Lease + time.Second)
		w := f.do(call{key: "k", body: body})
		close(release)
		old := <-stale
		if mode == idemstore.FailClosed {
			expect(t, w, http.StatusConflict, problem.OutcomeUnknown)
			// The late request is fenced out: it may not complete the key.
			expect(t, old, http.StatusConflict, problem.InProgress)
			expect(t, f.do(call{key: "k", body: body}), http.StatusConflict, problem.OutcomeUnknown)
			continue
		}
		expect(t, w, http.StatusCreated, "")
		expect(t, old, http.StatusConflict, problem.InProgress)
		if r := f.do(call{key: "k", body: body}); r.Header().Get("Idempotent-Replayed") != "true" || r.Body.String() != w.Body.String() {
			t.Fatalf("after takeover the replay is not the taker's response: %d %s", r.Code, r.Body)
		}
	}
}

func TestExpiredKeyIsNew(t *testing.T) {
	f := newFixture(t, transferPolicy())
	expect(t, f.do(call{key: "k", body: body}), http.StatusCreated, "")
	f.clock.Advance(25 * time.Hour)
	expect(t, f.do(call{key: "k", body: `{"amount": 5, "to": "x"}`}), http.StatusCreated, "")
	if f.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", f.runs.Load())
	}
}

func TestUnparseableBodyClaimsNothing(t *testing.T) {
	f := newFixture(t, transferPolicy())
	expect(t, f.do(call{key: "k", body: `{"amount": 10`}), http.StatusBadRequest, problem.InvalidBody)
	if f.runs.Load() != 0 || f.store.Len() != 0 {
		t.Fatal("an unparseable body ran the handler or claimed the key")
	}
	expect(t, f.do(call{key: "k", body: body}), http.StatusCreated, "")
}

func TestHandlerSeesTheWholeBody(t *testing.T) {
	f := newFixture(t, transferPolicy())
	w := f.do(call{key: "k", body: body})
	if !strings.Contains(w.Body.String(), `"memo": "rent"`) {
		t.Fatalf("handler did not get the body intact: %s", w.Body)
	}
}

// failing is a store that cannot be reached.
type failing struct{ idemstore.Store }

func (failing) Claim(context.Context, idemstore.Claim) (idemstore.Result, error) {
	return idemstore.Result{}, errors.New("dial tcp: connection refused")
}

func TestStoreUnavailableIs503AndRunsNothing(t *testing.T) {
	ran := false
	e, err := idem.New(idem.Config{
		Store:    failing{memstore.New()},
		Policies: []idem.Policy{transferPolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	expect(t, w, http.StatusServiceUnavailable, problem.StoreUnavailable)
	if w.Header().Get("Retry-After") == "" || ran {
		t.Fatalf("Retry-After %q, handler ran %v", w.Header().Get("Retry-After"), ran)
	}
}

func TestUnprotectedOperationsAreUntouched(t *testing.T) {
	f := newFixture(t, transferPolicy())
	for _, c := range []call{
		{method: http.MethodGet, path: "/transfers"},
		{method: http.MethodPut, path: "/transfers", key: "k", body: "not json"},
		{method: http.MethodPost, path: "/accounts", key: "k", body: "not json"},
	} {
		if w := f.do(c); w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("%s %s: status %d", c.method, c.path, w.Code)
		}
	}
	if f.store.Len() != 0 {
		t.Fatal("an unprotected request claimed a key")
	}
}

func TestNewRefusesWhatItCannotProtect(t *testing.T) {
	tx := transferPolicy()
	tx.Transactional = true
	bad := transferPolicy()
	bad.Lease = bad.TTL
	// A lease below a microsecond passed New, then failed every claim's
	// Check: each keyed request was a 503 for as long as the server ran.
	tiny := transferPolicy()
	tiny.Lease = 500 * time.Nanosecond
	badPointer := transferPolicy()
	badPointer.Key = idem.KeySource{In: key.InBody, Name: "idempotency_key"}
	// net/http's server never shows Host in Request.Header: every
	// request would count as keyless.
	hostKey := transferPolicy()
	hostKey.Key = idem.KeySource{In: key.InHeader, Name: "host"}
	tenant := func(*http.Request) (string, bool) { return "t", true }
	for name, cfg := range map[string]idem.Config{
		"no store":                         {Tenant: tenant},
		"no tenant":                        {Store: memstore.New()},
		"transactional without tx store":   {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{tx}},
		"lease not shorter than ttl":       {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{bad}},
		"lease below 1µs":                  {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{tiny}},
		"duplicate operation":              {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{transferPolicy(), transferPolicy()}},
		"body key that is no JSON Pointer": {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{badPointer}},
		"key in a header the server hides": {Store: memstore.New(), Tenant: tenant, Policies: []idem.Policy{hostKey}},
	} {
		if _, err := idem.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestObserverSeesOutcomes(t *testing.T) {
	f := newFixture(t, transferPolicy())
	f.do(call{key: "k", body: body})
	f.do(call{key: "k", body: body})
	f.do(call{key: "k", body: `{"amount": 1}`})
	var got []idem.Outcome
	for range 3 {
		got = append(got, (<-f.events).Outcome)
	}
	want := []idem.Outcome{idem.OutcomeExecuted, idem.OutcomeReplayed, idem.OutcomeMismatch}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
	}
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	f := newFixture(t, transferPolicy())
	var wg sync.WaitGroup
	var created, conflicts atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := f.do(call{key: "same", body: body})
			switch {
			case w.Code == http.StatusCreated:
				created.Add(1)
			case w.Code == http.StatusConflict:
				conflicts.Add(1)
			default:
				t.Errorf("unexpected status %d", w.Code)
			}
		}()
	}
	wg.Wait()
	if f.runs.Load() != 1 || created.Load()+conflicts.Load() != 64 {
		t.Fatalf("runs %d, created %d, conflicts %d", f.runs.Load(), created.Load(), conflicts.Load())
	}
}

func TestBodyAndQueryKeys(t *testing.T) {
	bodyKey := transferPolicy()
	bodyKey.Key = idem.KeySource{In: key.InBody, Name: "/idempotency_key"}
	bodyKey.Fingerprint = fingerprint.Spec{Exclude: "/idempotency_key"}
	f := newFixture(t, bodyKey)
	expect(t, f.do(call{body: `{"idempotency_key": "k1", "amount": 5}`}), http.StatusCreated, "")
	// The key is not part of the fingerprint: a new key on the same body is
	// a new request, not a mismatch.
	expect(t, f.do(call{body: `{"idempotency_key": "k2", "amount": 5}`}), http.StatusCreated, "")
	if w := f.do(call{body: `{"amount": 5, "idempotency_key": "k1"}`}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("body key did not replay: %d", w.Code)
	}
	expect(t, f.do(call{body: `{"idempotency_key": "k1", "amount": 6}`}), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, f.do(call{body: `{"idempotency_key": 7}`}), http.StatusBadRequest, problem.InvalidKey)
	expect(t, f.do(call{body: `{"idempotency_key": "k3"`}), http.StatusBadRequest, problem.InvalidBody)
	expect(t, f.do(call{body: `{"amount": 5}`}), http.StatusBadRequest, problem.MissingKey)
	if f.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", f.runs.Load())
	}

	queryKey := transferPolicy()
	queryKey.Key = idem.KeySource{In: key.InQuery, Name: "idempotency_key"}
	queryKey.Fingerprint = fingerprint.Spec{Query: []string{"dry_run"}}
	g := newFixture(t, queryKey)
	expect(t, g.do(call{path: "/transfers?idempotency_key=q1&dry_run=false", body: body}), http.StatusCreated, "")
	expect(t, g.do(call{path: "/transfers?dry_run=true&idempotency_key=q1", body: body}), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, g.do(call{path: "/transfers?idempotency_key=q1&idempotency_key=q2", body: body}), http.StatusBadRequest, problem.InvalidKey)
	if w := g.do(call{path: "/transfers?dry_run=false&idempotency_key=q1", body: body}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("query key did not replay: %d", w.Code)
	}
}

// A key carried in the body may be any identifier its schema allows, not
// only the visible ASCII a header key is held to: a JSON string or a form
// field carries any text (docs/semantics.md §2).
func TestMultiByteBodyKey(t *testing.T) {
	p := transferPolicy()
	p.Key = idem.KeySource{In: key.InBody, Name: "/idempotency_key"}
	p.KeyMaxLength = 14
	p.Fingerprint = fingerprint.Spec{Exclude: "/idempotency_key"}
	f := newFixture(t, p)
	expect(t, f.do(call{body: `{"idempotency_key": "clé-paiement-1", "amount": 5}`}), http.StatusCreated, "")
	w := f.do(call{body: `{"amount": 5, "idempotency_key": "cl\u00e9-paiement-1"}`})
	if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the multi-byte key did not replay: %d %s", w.Code, w.Body)
	}
	// 14 characters in 15 bytes is within keyMaxLength 14; 15 characters is not.
	expect(t, f.do(call{body: `{"idempotency_key": "clé-paiement-12", "amount": 5}`}), http.StatusBadRequest, problem.InvalidKey)
	expect(t, f.do(call{body: `{"idempotency_key": "clé paiement", "amount": 5}`}), http.StatusBadRequest, problem.InvalidKey)
	form := "application/x-www-form-urlencoded"
	expect(t, f.do(call{contentType: form, body: "idempotency_key=%E6%94%AF%E6%89%95%E3%81%84&amount=5"}), http.StatusCreated, "")
	if f.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", f.runs.Load())
	}

	// The header keeps its own rule: a header value is visible ASCII.
	g := newFixture(t, transferPolicy())
	expect(t, g.do(call{key: "clé-paiement-1", body: body}), http.StatusBadRequest, problem.InvalidKey)
}

func TestFormBodies(t *testing.T) {
	p := transferPolicy()
	p.Fingerprint = fingerprint.Spec{Body: []fingerprint.Field{
		{Pointer: "/amount", Type: fingerprint.Integer},
		{Pointer: "/metadata/order", Type: fingerprint.String},
	}}
	f := newFixture(t, p)
	form := "application/x-www-form-urlencoded"
	expect(t, f.do(call{key: "f", contentType: form, body: "amount=1000&metadata[order]=A1&memo=x"}), http.StatusCreated, "")
	if w := f.do(call{key: "f", contentType: form, body: "metadata%5Border%5D=A1&amount=1000"}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reordered form did not replay: %d %s", w.Code, w.Body)
	}
	// A form value keeps its spelling: strconv.Atoi takes 1000, not 1e3.
	expect(t, f.do(call{key: "f", contentType: form, body: "metadata[order]=A1&amount=1e3"}), http.StatusUnprocessableEntity, problem.KeyReused)
	expect(t, f.do(call{key: "f", contentType: form, body: "amount=1000&metadata[order]=A2"}), http.StatusUnprocessableEntity, problem.KeyReused)
}

func TestBodyOfAnotherMediaTypeIsRefused(t *testing.T) {
	p := transferPolicy()
	p.Fingerprint.MediaType = "application/json"
	f := newFixture(t, p)
	// curl -d labels a JSON body as a form. Read as a form, its fields
	// would all be missing and every amount would look the same.
	form := "application/x-www-form-urlencoded"
	expect(t, f.do(call{key: "k", contentType: form, body: body}), http.StatusUnsupportedMediaType, problem.UnsupportedMediaType)
	expect(t, f.do(call{key: "k", contentType: "text/plain", body: body}), http.StatusUnsupportedMediaType, problem.UnsupportedMediaType)
	if f.runs.Load() != 0 || f.store.Len() != 0 {
		t.Fatal("a refused media type ran the handler or claimed the key")
	}
	expect(t, f.do(call{key: "k", contentType: "application/json; charset=utf-8", body: body}), http.StatusCreated, "")
	expect(t, f.do(call{key: "k", contentType: "application/merge-patch+json", body: `{"amount": 1001, "to": "acc_2"}`}), http.StatusUnprocessableEntity, problem.KeyReused)

	// A body without Content-Type is read as the declared type.
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount": 1002, "to": "acc_2"}`))
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	f.server.ServeHTTP(w, r)
	expect(t, w, http.StatusUnprocessableEntity, problem.KeyReused)
}

func TestReplayCarriesAFreshDate(t *testing.T) {
	f := newFixture(t, transferPolicy())
	inner := f.handler
	f.handler = func(w http.ResponseWriter, r *http.Request) {
		// A handler that sets Date itself: the stored one must not come back.
		w.Header().Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
		inner(w, r)
	}
	srv := httptest.NewServer(f.server)
	defer srv.Close()
	send := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set("Idempotency-Key", "dated")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	send()
	replay := send()
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second request was not a replay: %d", replay.StatusCode)
	}
	date, err := http.ParseTime(replay.Header.Get("Date"))
	if err != nil {
		t.Fatalf("replay Date %q: %v", replay.Header.Get("Date"), err)
	}
	if age := time.Since(date); age > time.Minute || age < -time.Minute {
		t.Fatalf("replay Date %v is not the time of the replay", date)
	}
}

func TestUnresolvedTenantNeverRuns(t *testing.T) {
	f := newFixture(t, transferPolicy())
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	f.server.ServeHTTP(w, r)
	expect(t, w, http.StatusInternalServerError, problem.TenantUnresolved)
	if f.runs.Load() != 0 || f.store.Len() != 0 {
		t.Fatal("a request without a tenant ran the handler or claimed a key")
	}
}

func TestKeylessRequestStreamsUntouched(t *testing.T) {
	p := transferPolicy()
	p.Required = false
	e, err := idem.New(idem.Config{
		Store:           memstore.New(),
		Policies:        []idem.Policy{p},
		Tenant:          func(*http.Request) (string, bool) { return "acme", true },
		MaxRequestBytes: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got int
	h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = len(b)
	}))
	big := strings.Repeat("x", 1000)
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(big))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || got != len(big) {
		t.Fatalf("keyless request: status %d, handler read %d bytes; want it untouched (200, %d bytes)", w.Code, got, len(big))
	}
	// With a key the body is read for the fingerprint, within the limit.
	r = httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(big))
	r.Header.Set("Idempotency-Key", "k")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	expect(t, w, http.StatusRequestEntityTooLarge, problem.BodyTooLarge)
}

func TestTxHandlerWithoutTransactionNeverRuns(t *testing.T) {
	ran := false
	h := idem.TxHandler("createTransfer", func(w http.ResponseWriter, r *http.Request, tx *strings.Builder) { ran = true })
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body)))
	expect(t, w, http.StatusInternalServerError, problem.TransactionMissing)
	if ran {
		t.Fatal("a transactional handler ran without its transaction")
	}
}
