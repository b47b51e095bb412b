package idemclient

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
)

// redirect answers with status and a Location.
func redirect(status int, to string) func(*http.Request) (*http.Response, error) {
	return answer(status, http.Header{"Location": {to}}, "")
}

// do sends a POST of body to url through an http.Client over tr, which
// follows redirects, and returns the call's report.
func do(t *testing.T, tr *Transport, url, body string) (*http.Response, Report) {
	t.Helper()
	var rep Report
	req, err := http.NewRequestWithContext(WithReport(context.Background(), &rep), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(res.Body)
	res.Body.Close()
	return res, rep
}

// Every hop of a chain of redirects that keep the method carries the key
// of the first, to targets in the table and out of it, each retried as
// the operation's attempts are; the report counts the call's attempts and
// redirects, and the last hop's answer. OnCall hears each hop, each
// report covering the hops before it.
func TestRedirectChainKeepsTheKey(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		redirect(307, "/elsewhere"),
		problemAnswer(503, problem.StoreUnavailable, ""),
		redirect(308, "http://other.test/transfers"),
		answer(201, http.Header{"Idempotent-Replayed": {"true"}}, ""),
	}}
	var heard []Report
	tr, _ := newTest(t, s, Config{OnCall: func(_ *http.Request, r Report) { heard = append(heard, r) }})
	res, rep := do(t, tr, "http://api.test/transfers", `{"amount":5}`)
	if res.StatusCode != 201 || len(s.got) != 4 {
		t.Fatalf("%d after %d requests, want 201 after 4", res.StatusCode, len(s.got))
	}
	k := s.got[0].key
	for i, g := range s.got {
		if g.key != k || g.body != `{"amount":5}` {
			t.Errorf("request %d (%s) sent key %q, body %q; want %q and the caller's body", i+1, g.path, g.key, g.body, k)
		}
	}
	want := Report{Operation: "createTransfer", Key: k, Attempts: 4, Redirects: 2, Replayed: true, Status: 201}
	if rep != want {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	if len(heard) != 3 || heard[0].Redirects != 0 || heard[1].Attempts != 3 || heard[2] != want {
		t.Errorf("OnCall heard %+v; want 3 hops, the last the whole call", heard)
	}
}

// A redirect that changes the method (a 303 to GET) is another request:
// the key of the POST is not sent with it. The report still names the
// call's operation and key.
func TestSeeOtherDropsTheKey(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		redirect(303, "/transfers/tr_1"),
		answer(200, nil, `{"id":"tr_1"}`),
	}}
	tr, _ := newTest(t, s, Config{})
	res, rep := do(t, tr, "http://api.test/transfers", `{"amount":5}`)
	if res.StatusCode != 200 || len(s.got) != 2 || s.got[1].method != http.MethodGet {
		t.Fatalf("%d after %q, want 200 after a GET", res.StatusCode, s.got)
	}
	if s.got[0].key == "" || s.got[1].key != "" {
		t.Errorf("keys %q then %q; want the POST's key, then none", s.got[0].key, s.got[1].key)
	}
	want := Report{Operation: "createTransfer", Key: s.got[0].key, Attempts: 2, Redirects: 1, Status: 200}
	if rep != want {
		t.Errorf("report %+v, want %+v", rep, want)
	}
}
