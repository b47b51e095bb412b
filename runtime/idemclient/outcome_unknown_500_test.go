package idemclient

import (
	"context"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
)

// docs/http.md answers a transactional request whose writes may or may not
// stand with 500 outcome-unknown: "do not retry; contact support"; the
// problem's detail says the same, and docs/semantics.md §5.4 keeps the
// key held or indeterminate, never free. docs/client.md says the
// Transport never retries outcome-unknown and retries a 500 only because
// "none of these answers is stored by the server, so the key is free for
// the retry", which is not so here. The Transport retries this 500 as any
// other: its retries meet the held key (409 request-in-progress) until
// the budget is spent, and the caller gets a 409 request-in-progress with
// GaveUp, never the answer that told it to stop and call support.
func TestOutcomeUnknown500IsFinal(t *testing.T) {
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		problemAnswer(http.StatusInternalServerError, problem.OutcomeUnknown, ""),
		problemAnswer(http.StatusConflict, problem.InProgress, "1"),
		problemAnswer(http.StatusConflict, problem.InProgress, "1"),
	}}
	tr, _ := newTest(t, s, Config{MaxAttempts: 3})
	res, rep, err := post(t, tr, context.Background(), "http://api.test/transfers", `{"amount":5}`)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Attempts != 1 || res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("500 outcome-unknown was retried: %d attempts, final status %d, GaveUp %v; want it final after 1 attempt", rep.Attempts, res.StatusCode, rep.GaveUp)
	}
}
