package idemclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/key"
)

// keyServer records the key header lines of each request it receives.
func keyServer(t *testing.T) (*httptest.Server, *[][]string) {
	t.Helper()
	var (
		mu  sync.Mutex
		got [][]string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// Keys the server would refuse are refused before anything is sent,
// whether the caller put them in the request or the context.
func TestAttackInvalidCallerKeys(t *testing.T) {
	srv, got := keyServer(t)
	tr, err := New(Config{Operations: []Operation{transferOp()}})
	if err != nil {
		t.Fatal(err)
	}
	for name, set := range map[string]func(*http.Request) *http.Request{
		"repeated":  func(r *http.Request) *http.Request { r.Header["Idempotency-Key"] = []string{"a", "b"}; return r },
		"unclosed":  func(r *http.Request) *http.Request { r.Header.Set("Idempotency-Key", `"abc`); return r },
		"non-ASCII": func(r *http.Request) *http.Request { r.Header.Set("Idempotency-Key", "clé"); return r },
		"too long": func(r *http.Request) *http.Request {
			r.Header.Set("Idempotency-Key", strings.Repeat("k", 256))
			return r
		},
		"context space": func(r *http.Request) *http.Request { return WithKeyRequest(r, "a b") },
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader("{}"))
		if _, err := tr.RoundTrip(set(req)); !errors.Is(err, ErrInvalidKey) || len(*got) != 0 {
			t.Errorf("%s: %v, %d requests; want ErrInvalidKey and nothing sent", name, err, len(*got))
		}
	}
	// An empty WithKey names no key of the caller's: a fresh one is sent.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader("{}"))
	res, err := tr.RoundTrip(WithKeyRequest(req, ""))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(*got) != 1 || len((*got)[0]) != 1 || len((*got)[0][0]) != 26 {
		t.Errorf("an empty WithKey sent the keys %q; want one fresh key", *got)
	}
}

// A key header or query parameter sent once with an empty value, as a
// client generated from a spec that requires the key writes it when its
// caller left it unset, leaves the choice to the Transport: the key given
// with WithKey, else a fresh one, is sent in its place, and the other
// query parameters keep their spelling.
func TestEmptyKeyIsChosenByTheTransport(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.Join(r.Header.Values("Idempotency-Key"), ",")+"|"+r.URL.RawQuery)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	queryOp := Operation{ID: "q", Method: http.MethodPost, Path: "/q", Key: Key{In: key.InQuery, Name: "idem"}, TTL: transferOp().TTL}
	tr, err := New(Config{Operations: []Operation{transferOp(), queryOp}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(url string, header bool, ctxKey string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		if header {
			req.Header.Set("Idempotency-Key", "")
		}
		if ctxKey != "" {
			req = WithKeyRequest(req, ctxKey)
		}
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		res.Body.Close()
	}
	send(srv.URL+"/transfers", true, "")
	send(srv.URL+"/transfers", true, "chosen-1")
	send(srv.URL+"/q?a=1&idem=&b=%20", false, "chosen-2")
	if len(seen) != 3 {
		t.Fatalf("%d requests sent, want 3", len(seen))
	}
	if k, _, _ := strings.Cut(seen[0], "|"); len(k) != 26 {
		t.Errorf("empty header: sent %q, want one fresh key", seen[0])
	}
	if seen[1] != "chosen-1|" {
		t.Errorf("empty header with WithKey: sent %q, want chosen-1", seen[1])
	}
	if seen[2] != "|a=1&b=%20&idem=chosen-2" {
		t.Errorf("empty query key with WithKey: sent %q, want a=1&b=%%20&idem=chosen-2", seen[2])
	}
}

// A key the caller set under another spelling of the header's name is the
// request's key: it is sent once, not beside a fresh one (which the server
// would refuse as a repeated header).
func TestAttackKeyHeaderCase(t *testing.T) {
	srv, got := keyServer(t)
	tr, err := New(Config{Operations: []Operation{transferOp()}})
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), http.MethodPost, srv.URL+"/transfers", strings.NewReader("{}"))
	req.Header["idempotency-key"] = []string{"mine"}
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(*got) != 1 || len((*got)[0]) != 1 || (*got)[0][0] != "mine" || rep.Key != "mine" {
		t.Errorf("the server read the key lines %q, report key %q; want just \"mine\"", *got, rep.Key)
	}
	//lint:ignore SA1008 the caller's own spelling is what is under test
	if _, ok := req.Header["Idempotency-Key"]; ok || len(req.Header["idempotency-key"]) != 1 {
		t.Error("the caller's request was changed")
	}

	// Two spellings, two keys: refused before anything is sent.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader("{}"))
	req.Header["idempotency-key"] = []string{"a"}
	req.Header.Set("Idempotency-Key", "b")
	if _, err := tr.RoundTrip(req); !errors.Is(err, ErrInvalidKey) || len(*got) != 1 {
		t.Errorf("two key headers: %v, %d requests; want ErrInvalidKey and nothing sent", err, len(*got))
	}
}

// Idempotent-Replayed is the server's word that an answer is its record
// of a keyed request: asking again would only return the same record, so a
// replayed answer ends the retries whatever its status, and the Report
// says it was replayed. A request sent without a key has no record: on its
// answer the header is noise, which neither ends the retries nor is
// reported.
func TestAttackReplayedClaim(t *testing.T) {
	replayed := http.Header{"Idempotent-Replayed": {"true"}, "Content-Type": {"application/problem+json"}}
	inProgress := `{"type":"https://idemgen.dev/problems/request-in-progress"}`
	for name, a := range map[string]func(*http.Request) (*http.Response, error){
		"500":                 answer(500, replayed, ""),
		"503":                 answer(503, replayed, ""),
		"409 in progress":     answer(409, replayed, inProgress),
		"429 with a deadline": answer(429, http.Header{"Idempotent-Replayed": {"true"}, "Retry-After": {"1"}}, ""),
	} {
		s := &script{answers: []func(*http.Request) (*http.Response, error){a}}
		tr, waits := newTest(t, s, Config{})
		res, rep, err := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
		if err != nil || len(s.got) != 1 || len(*waits) != 0 || rep.Attempts != 1 || !rep.Replayed || rep.GaveUp || rep.Status != res.StatusCode {
			t.Errorf("a replayed %s: %v, %d requests, report %+v; want it final after one attempt, replayed", name, err, len(s.got), rep)
		}
	}

	s := &script{answers: []func(*http.Request) (*http.Response, error){answer(503, replayed, ""), answer(200, replayed, "")}}
	tr, _ := newTest(t, s, Config{})
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), http.MethodGet, "http://api.test/transfers", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if rep.Attempts != 2 || rep.Replayed || rep.Key != "" {
		t.Errorf("a GET sent without a key reported %+v; want its 503 retried, no replay", rep)
	}
}
