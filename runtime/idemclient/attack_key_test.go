package idemclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
		"empty":     func(r *http.Request) *http.Request { r.Header.Set("Idempotency-Key", ""); return r },
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

// Idempotent-Replayed is the server's word about a keyed request it has a
// record of. It does not stop a retry of an answer the server never
// stores; the Report claims a replay only for a final answer to a request
// sent with a key, never for a keyless one or one given up on.
func TestAttackReplayedClaim(t *testing.T) {
	replayed := http.Header{"Idempotent-Replayed": {"true"}, "Content-Type": {"application/problem+json"}}
	inProgress := `{"type":"https://idemgen.dev/problems/request-in-progress"}`
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		answer(503, replayed, ""), answer(409, replayed, inProgress), answer(201, nil, ""),
	}}
	tr, _ := newTest(t, s, Config{})
	res, rep, _ := post(t, tr, context.Background(), "http://api.test/transfers", `{}`)
	if res.StatusCode != 201 || rep.Attempts != 3 || rep.Replayed {
		t.Errorf("report %+v; want a 201 after 3 attempts, not replayed", rep)
	}

	s = &script{answers: []func(*http.Request) (*http.Response, error){answer(409, replayed, inProgress)}}
	tr, _ = newTest(t, s, Config{MaxAttempts: 1})
	if _, rep, _ = post(t, tr, context.Background(), "http://api.test/transfers", `{}`); !rep.GaveUp || rep.Replayed {
		t.Errorf("a 409 in-progress given up on reported %+v; want given up, no replay", rep)
	}

	s = &script{answers: []func(*http.Request) (*http.Response, error){answer(200, replayed, "")}}
	tr, _ = newTest(t, s, Config{})
	var rep2 Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep2), http.MethodGet, "http://api.test/transfers", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if rep2.Replayed || rep2.Key != "" {
		t.Errorf("a GET sent without a key reported %+v; want no replay", rep2)
	}
}
