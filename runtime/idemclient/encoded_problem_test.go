package idemclient

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/problem"
)

// docs/client.md: the Transport "retries ... 409 request-in-progress". It
// tells that 409 from the others by the problem type in the start of its
// body, read as it came. Behind compression middleware (echo's Gzip and
// gin-contrib's gzip compress every answer) a caller that asks for gzip
// itself (Accept-Encoding set on the request, so net/http leaves the body
// encoded) gets a gzip body, whose type the Transport cannot read: the
// 409 request-in-progress is taken for a final answer, not retried, and
// handed to the caller as if it were the operation's outcome, with
// GaveUp false.
func TestEncodedInProgressIsRetried(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = io.WriteString(zw, `{"type":"https://idemgen.dev/problems/`+problem.InProgress+`","title":"t","status":409}`)
	_ = zw.Close()
	inProgress := answer(http.StatusConflict, http.Header{
		"Content-Type": {"application/problem+json"}, "Content-Encoding": {"gzip"}, "Retry-After": {"0"},
	}, z.String())
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		inProgress,
		answer(http.StatusCreated, http.Header{"Idempotent-Replayed": {"true"}}, `{"id":"tr_1"}`),
	}}
	tr, _ := newTest(t, s, Config{})
	var rep Report
	req, _ := http.NewRequestWithContext(WithReport(context.Background(), &rep), http.MethodPost, "http://api.test/transfers", strings.NewReader(`{"amount":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusCreated || rep.Attempts != 2 {
		t.Fatalf("a gzip-encoded 409 request-in-progress ended the call: status %d after %d attempt(s), GaveUp %v; want it retried and the replayed 201",
			res.StatusCode, rep.Attempts, rep.GaveUp)
	}
}
