package idemclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
)

// transferOp is a header-keyed operation like the example's createTransfer.
func transferOp() Operation {
	return Operation{
		ID: "createTransfer", Method: http.MethodPost, Path: "/transfers",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, KeyMaxLength: 255, TTL: 24 * time.Hour,
	}
}

// seen is one attempt as the scripted server received it.
type seen struct {
	method, path, query, key, body string
}

// script is a Base RoundTripper that answers each attempt with the next of
// its answers and records what it received.
type script struct {
	mu      sync.Mutex
	answers []func(*http.Request) (*http.Response, error)
	got     []seen
}

func (s *script) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	s.mu.Lock()
	s.got = append(s.got, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Idempotency-Key"), string(body)})
	n := len(s.got)
	s.mu.Unlock()
	if n > len(s.answers) {
		return nil, fmt.Errorf("attempt %d was not expected", n)
	}
	return s.answers[n-1](r)
}

func answer(status int, header http.Header, body string) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		for k, v := range header {
			h[k] = v
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
}

func problemAnswer(status int, name string, retryAfter string) func(*http.Request) (*http.Response, error) {
	h := http.Header{"Content-Type": {"application/problem+json"}}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	return answer(status, h, fmt.Sprintf(`{"type":"https://idemgen.dev/problems/%s","title":"t","status":%d}`, name, status))
}

func fail(err error) func(*http.Request) (*http.Response, error) {
	return func(*http.Request) (*http.Response, error) { return nil, err }
}

// newTest returns a Transport over s whose waits are recorded, not slept.
func newTest(t *testing.T, s *script, cfg Config) (*Transport, *[]time.Duration) {
	t.Helper()
	cfg.Base = s
	if cfg.Operations == nil {
		cfg.Operations = []Operation{transferOp()}
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	tr.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	return tr, &waits
}

func post(t *testing.T, tr *Transport, ctx context.Context, url, body string) (*http.Response, Report, error) {
	t.Helper()
	var rep Report
	req, err := http.NewRequestWithContext(WithReport(ctx, &rep), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.RoundTrip(req)
	if res != nil {
		defer res.Body.Close()
		_, _ = io.ReadAll(res.Body)
	}
	return res, rep, err
}

func TestRetrySameKeySameBody(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		fail(errors.New("connection reset by peer")),
		problemAnswer(409, problem.InProgress, "1"),
		problemAnswer(503, problem.StoreUnavailable, "2"),
		answer(429, nil, ""),
		answer(500, nil, ""),
		answer(201, http.Header{"Idempotent-Replayed": {"true"}}, `{"id":"tr_1"}`),
	}}
	tr, waits := newTest(t, s, Config{})
	res, rep, err := post(t, tr, context.Background(), "http://api.test/transfers", `{"amount":5}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 201 {
		t.Fatalf("status %d, want 201", res.StatusCode)
	}
	if len(s.got) != 6 {
		t.Fatalf("%d attempts, want 6", len(s.got))
	}
	k := s.got[0].key
	if len(k) != 26 {
		t.Errorf("fresh key %q, want 26 random characters", k)
	}
	for i, g := range s.got {
		if g.key != k || g.body != `{"amount":5}` {
			t.Errorf("attempt %d sent key %q body %q, want %q and the same body", i+1, g.key, g.body, k)
		}
	}
	want := Report{Operation: "createTransfer", Key: k, Attempts: 6, Replayed: true, Status: 201}
	if rep != want {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	// Retry-After is honoured: at least 1 s after the 409, 2 s after the 503.
	if len(*waits) != 5 || (*waits)[1] < time.Second || (*waits)[2] < 2*time.Second {
		t.Errorf("waits %v, want 5 with the 2nd ≥ 1s and the 3rd ≥ 2s", *waits)
	}
	// Full jitter: without Retry-After, no wait is above its ceiling.
	if (*waits)[0] > DefaultBackoffBase || (*waits)[3] > 8*DefaultBackoffBase {
		t.Errorf("waits %v exceed the backoff ceilings", *waits)
	}
}

func TestFreshKeyPerCall(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(201, nil, ""), answer(201, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
	post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
	if s.got[0].key == s.got[1].key {
		t.Errorf("two logical calls shared the key %q", s.got[0].key)
	}
}

func TestFinalAnswersNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*http.Request) (*http.Response, error)
	}{
		{"422 key reused", problemAnswer(422, problem.KeyReused, "")},
		{"409 outcome unknown", problemAnswer(409, problem.OutcomeUnknown, "")},
		{"409 not replayable", problemAnswer(409, problem.NotReplayable, "")},
		{"409 of the application", answer(409, nil, `{"error":"insufficient funds"}`)},
		{"400", problemAnswer(400, problem.InvalidKey, "")},
		{"404", answer(404, nil, "")},
		{"certificate", fail(&tlsErr)},
		{"permanent", fail(fmt.Errorf("quota: %w", ErrPermanent))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: []func(*http.Request) (*http.Response, error){tc.answer}}
			tr, _ := newTest(t, s, Config{})
			_, rep, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
			if len(s.got) != 1 || rep.Attempts != 1 || rep.GaveUp {
				t.Errorf("%d attempts (report %+v), want 1 and no give-up", len(s.got), rep)
			}
		})
	}
}

func TestFinalBodyReadable(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){problemAnswer(409, problem.OutcomeUnknown, "")}}
	tr, _ := newTest(t, s, Config{})
	req, _ := http.NewRequest(http.MethodPost, "http://api.test/transfers", strings.NewReader("{}"))
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if ProblemType(b) != problem.OutcomeUnknown {
		t.Errorf("body %q lost its start after the problem type was read", b)
	}
}

func TestWithoutPolicy(t *testing.T) {
	// A POST the table does not know is sent once, whatever comes back.
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(503, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	_, rep, _ := post(t, tr, context.Background(), "http://api.test/refunds", `{}`)
	if len(s.got) != 1 || s.got[0].key != "" || rep.Operation != "" {
		t.Errorf("POST without a policy: %d attempts, key %q, report %+v; want 1, none", len(s.got), s.got[0].key, rep)
	}
	// A GET is idempotent by HTTP and retried.
	s = &script{answers: []func(*http.Request) (*http.Response, error){answer(503, nil, ""), answer(200, nil, "")}}
	tr, _ = newTest(t, s, Config{})
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/transfers", nil)
	res, err := tr.RoundTrip(req)
	if err != nil || res.StatusCode != 200 || len(s.got) != 2 || s.got[1].key != "" {
		t.Errorf("GET: %v, %d attempts; want 200 after 2, no key", err, len(s.got))
	}
}

func TestGivesUpWithinAttempts(t *testing.T) {
	var answers []func(*http.Request) (*http.Response, error)
	for range 3 {
		answers = append(answers, problemAnswer(503, problem.StoreUnavailable, ""))
	}
	s := &script{answers: answers}
	tr, _ := newTest(t, s, Config{MaxAttempts: 3})
	res, rep, err := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
	if err != nil || res.StatusCode != 503 || !rep.GaveUp || rep.Attempts != 3 {
		t.Errorf("got %v, %+v; want the last 503 after 3 attempts, given up", err, rep)
	}
}

func TestRetryAfterBeyondBudget(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){problemAnswer(409, problem.InProgress, "10")}}
	tr, waits := newTest(t, s, Config{Budget: 5 * time.Second})
	res, rep, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
	if res.StatusCode != 409 || !rep.GaveUp || len(*waits) != 0 {
		t.Errorf("a Retry-After beyond the budget: report %+v, waits %v; want the 409 at once, given up", rep, *waits)
	}
}

// A client told Retry-After waits at least that long and up to a quarter
// longer, drawn, so that the clients a server answered together do not
// come back together; the spread never makes it give up a retry that the
// budget allows.
func TestRetryAfterSpread(t *testing.T) {
	for _, c := range []struct {
		budget      time.Duration
		least, most time.Duration
	}{
		{time.Minute, 5 * time.Second, 5 * time.Second},
		{4500 * time.Millisecond, 4 * time.Second, 4500 * time.Millisecond},
	} {
		s := &script{answers: []func(*http.Request) (*http.Response, error){
			problemAnswer(409, problem.InProgress, "4"),
			answer(201, nil, `{"id":"tr_1"}`),
		}}
		tr, waits := newTest(t, s, Config{Budget: c.budget})
		tr.draw = func(n time.Duration) time.Duration { return n - 1 }
		res, rep, err := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
		if err != nil || res.StatusCode != 201 || rep.GaveUp {
			t.Fatalf("budget %v: got %v %+v, want the 201", c.budget, err, rep)
		}
		if len(*waits) != 1 || (*waits)[0] < c.least || (*waits)[0] > c.most {
			t.Errorf("budget %v: waits %v, want one between %v and %v", c.budget, *waits, c.least, c.most)
		}
	}
}

func TestBudgetShorterThanTTL(t *testing.T) {
	op := transferOp()
	op.TTL = time.Minute
	if _, err := New(Config{Operations: []Operation{op}, Budget: time.Minute}); err == nil || !strings.Contains(err.Error(), "createTransfer") {
		t.Errorf("a budget equal to the TTL: err %v, want a refusal naming the operation", err)
	}
	tr, err := New(Config{Operations: []Operation{op}})
	if err != nil {
		t.Fatal(err)
	}
	if b := tr.budget["createTransfer"]; b != 30*time.Second {
		t.Errorf("default budget under a 1m TTL: %v, want 30s", b)
	}
	op.RetryBudget = 10 * time.Second
	tr, err = New(Config{Operations: []Operation{op}, Budget: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if b := tr.budget["createTransfer"]; b != 10*time.Second {
		t.Errorf("budget under clientRetryBudget 10s: %v, want 10s", b)
	}
}

func TestAttemptTimeoutRetried(t *testing.T) {
	block := func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	s := &script{answers: []func(*http.Request) (*http.Response, error){block, answer(201, nil, "{}")}}
	tr, _ := newTest(t, s, Config{})
	ctx := WithAttemptTimeout(context.Background(), 20*time.Millisecond)
	res, rep, err := post(t, tr, ctx, "http://api.test/transfers", `{}`)
	if err != nil || res.StatusCode != 201 || rep.Attempts != 2 || s.got[0].key != s.got[1].key {
		t.Errorf("got %v %+v; want 201 after a timed-out attempt, same key", err, rep)
	}
}

func TestCallerCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{answers: []func(*http.Request) (*http.Response, error){func(*http.Request) (*http.Response, error) {
		cancel()
		return nil, errors.New("connection refused")
	}}}
	tr, _ := newTest(t, s, Config{})
	_, _, err := post(t, tr, ctx, "http://api.test/transfers", `{}`)
	if !errors.Is(err, context.Canceled) || len(s.got) != 1 {
		t.Errorf("err %v after %d attempts, want context.Canceled after 1", err, len(s.got))
	}
}

func TestKeyChoices(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(201, nil, ""), answer(201, nil, ""), answer(201, nil, "")}}
	tr, _ := newTest(t, s, Config{})
	post(t, tr, WithKey(context.Background(), "order-42"), "http://api.test/transfers", `{}`)
	req, _ := http.NewRequest(http.MethodPost, "http://api.test/transfers", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "mine")
	_, _ = tr.RoundTrip(WithKeyRequest(req, "other"))
	post(t, tr, WithKey(context.Background(), `"quoted`), "http://api.test/transfers", `{}`)
	if s.got[0].key != "order-42" || s.got[1].key != "mine" || s.got[2].key != `"\"quoted"` {
		t.Errorf("keys sent %q, %q, %q; want the context's, the request's own, and a quoted one sent as a structured-field string", s.got[0].key, s.got[1].key, s.got[2].key)
	}
	if req.Header.Get("Idempotency-Key") != "mine" {
		t.Error("the caller's request was changed")
	}
	_, _, err := post(t, tr, WithKey(context.Background(), "bad key"), "http://api.test/transfers", `{}`)
	if !errors.Is(err, ErrInvalidKey) || len(s.got) != 3 {
		t.Errorf("a key with a space: %v, want ErrInvalidKey and nothing sent", err)
	}
}

// WithKeyRequest puts key in req's context.
func WithKeyRequest(req *http.Request, key string) *http.Request {
	return req.WithContext(WithKey(req.Context(), key))
}

func TestQueryAndBodyKeys(t *testing.T) {
	ops := []Operation{
		{ID: "q", Method: "POST", Path: "/q", Key: Key{In: key.InQuery, Name: "idem"}, TTL: time.Hour},
		{ID: "b", Method: "POST", Path: "/b", Key: Key{In: key.InBody, Name: "/idempotency_key"}, TTL: time.Hour},
		{ID: "n", Method: "POST", Path: "/n", Key: Key{In: key.InBody, Name: "/meta/key"}, TTL: time.Hour},
	}
	ok := answer(201, nil, "")
	s := &script{answers: []func(*http.Request) (*http.Response, error){ok, ok, ok, ok, ok, answer(503, nil, "")}}
	tr, _ := newTest(t, s, Config{Operations: ops})
	ctx := WithKey(context.Background(), "k1")
	post(t, tr, ctx, "http://api.test/q?b=2&a=1", `{}`)
	post(t, tr, ctx, "http://api.test/b", `{"amount":5}`)
	post(t, tr, ctx, "http://api.test/b", ` {} `)
	post(t, tr, ctx, "http://api.test/b", `{"idempotency_key":"own"}`)
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(ctx, &rep), "POST", "http://api.test/b", strings.NewReader("amount=5"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_, _ = tr.RoundTrip(req)
	_, rep2, _ := post(t, tr, ctx, "http://api.test/n", `{"amount":5}`)
	want := []string{"b=2&a=1&idem=k1", `{"idempotency_key":"k1","amount":5}`, `{"idempotency_key":"k1"}`, `{"idempotency_key":"own"}`, "amount=5&idempotency_key=k1"}
	got := []string{s.got[0].query, s.got[1].body, s.got[2].body, s.got[3].body, s.got[4].body}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d sent %q, want %q", i+1, got[i], want[i])
		}
	}
	if rep.Key != "k1" {
		t.Errorf("form call reported key %q", rep.Key)
	}
	// A nested body key the body lacks cannot be added: sent once, no retry.
	if len(s.got) != 6 || rep2.Attempts != 1 || rep2.Key != "" {
		t.Errorf("nested body key: %d attempts, report %+v; want 1 and no key", len(s.got), rep2)
	}
}

// A key the caller gives for a body key is held to the body's rule, which
// lets a JSON string or form field hold any script, and the header's rule
// still holds for a header key.
func TestMultiByteKeyGoesInTheBodyOnly(t *testing.T) {
	ops := []Operation{
		{ID: "b", Method: "POST", Path: "/b", Key: Key{In: key.InBody, Name: "/idempotency_key"}, TTL: time.Hour},
		{ID: "h", Method: "POST", Path: "/h", Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour},
	}
	ok := answer(201, nil, "")
	s := &script{answers: []func(*http.Request) (*http.Response, error){ok}}
	tr, _ := newTest(t, s, Config{Operations: ops})
	ctx := WithKey(context.Background(), "clé-paiement-1")
	if _, _, err := post(t, tr, ctx, "http://api.test/b", `{"amount":5}`); err != nil {
		t.Fatalf("a multi-byte body key was refused: %v", err)
	}
	if want := `{"idempotency_key":"clé-paiement-1","amount":5}`; len(s.got) != 1 || s.got[0].body != want {
		t.Fatalf("sent %+v, want the body %s", s.got, want)
	}
	if _, _, err := post(t, tr, ctx, "http://api.test/h", `{}`); !errors.Is(err, ErrInvalidKey) || len(s.got) != 1 {
		t.Errorf("a multi-byte header key: %v, want ErrInvalidKey and nothing sent", err)
	}
}

func TestMatchesTemplatesUnderBasePath(t *testing.T) {
	ops := []Operation{
		{ID: "adopt", Method: "POST", Path: "/pets/{pet_id}/adoptions", Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour},
		{ID: "cancel", Method: "POST", Path: "/orders/{name}:cancel", Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour},
	}
	tr, err := New(Config{Operations: ops, BasePath: "/v1/"})
	if err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]string{
		"http://h/v1/pets/p%2F1/adoptions": "adopt",
		"http://h/v1/orders/o-1:cancel":    "cancel",
		"http://h/pets/p1/adoptions":       "",
		"http://h/v1/pets/p1":              "",
		"http://h/v1/orders/o-1":           "",
	} {
		req, _ := http.NewRequest(http.MethodPost, url, nil)
		op, _ := tr.Lookup(req)
		if op.ID != want {
			t.Errorf("%s matched %q, want %q", url, op.ID, want)
		}
	}
	req, _ := http.NewRequest(http.MethodPatch, "http://h/v1/pets/p1/adoptions", nil)
	if _, ok := tr.Lookup(req); ok {
		t.Error("a PATCH matched a POST operation")
	}
}

func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"3":                             3 * time.Second,
		"Sun, 01 Mar 2026 12:00:05 GMT": 5 * time.Second,
		"Sun, 01 Mar 2026 11:00:00 GMT": 0,
	} {
		if got, ok := retryAfter([]string{v}, now); !ok || got != want {
			t.Errorf("Retry-After %q: %v %v, want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon"} {
		if _, ok := retryAfter([]string{v}, now); ok {
			t.Errorf("Retry-After %q accepted", v)
		}
	}
}

var tlsErr = tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")}

// rtFunc is an http.RoundTripper made of a function.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A POST that calls no operation of the table is sent once, as it came:
// its body is streamed through, never read into memory for a retry that
// cannot happen.
func TestRequestOutsideTheTableIsPassedThrough(t *testing.T) {
	var got *http.Request
	tr, err := New(Config{Operations: []Operation{transferOp()}, Base: rtFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: http.StatusCreated, Body: http.NoBody, Header: http.Header{}}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	body := io.NopCloser(strings.NewReader("a large upload"))
	req, _ := http.NewRequest(http.MethodPost, "http://example.test/uploads", body)
	res, err := tr.RoundTrip(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("RoundTrip = %v, %v", res, err)
	}
	if got != req || got.Body != body {
		t.Errorf("the request outside the table was copied (body read for a retry), not passed through")
	}
}

// An operation without a policy that the table marks Unprotected, more
// specific than a protected template that also matches its path (POST
// /pay/batch beside POST /pay/{id}), is the server router's choice for
// its path and runs there unprotected: the Transport sends it once, with
// no key, and retries nothing, while the protected operation keeps its
// key and retries.
func TestUnprotectedOperationIsSentOnce(t *testing.T) {
	capture := Operation{ID: "capture", Method: http.MethodPost, Path: "/pay/{id}",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour}
	batch := Operation{ID: "batch", Method: http.MethodPost, Path: "/pay/batch", Unprotected: true}
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		answer(http.StatusServiceUnavailable, nil, ""),
		answer(http.StatusServiceUnavailable, nil, ""),
		answer(http.StatusOK, nil, ""),
	}}
	tr, _ := newTest(t, s, Config{Operations: []Operation{capture, batch}, MaxAttempts: 3})
	if res, _, err := post(t, tr, context.Background(), "http://h/pay/batch", `{}`); err != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("batch: %v, %v; want its 503 as it came", res, err)
	}
	if len(s.got) != 1 || s.got[0].key != "" {
		t.Fatalf("batch was sent %d times (key %q); want once, with no key", len(s.got), s.got[0].key)
	}
	if res, _, err := post(t, tr, context.Background(), "http://h/pay/p1", `{}`); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("capture: %v, %v", res, err)
	}
	if len(s.got) != 3 || s.got[1].key == "" || s.got[1].key != s.got[2].key {
		t.Fatalf("capture: %+v; want a keyed first attempt and a retry under its key", s.got[1:])
	}
}
