package idemclient

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// The table marks POST /pay/batch Unprotected: the server's router sends
// it to a handler no key protects, so the Transport must send it once
// (TestUnprotectedOperationIsSentOnce). When a protected call to
// /pay/{id} is redirected there with a 307, the hop to /pay/batch is still
// the unprotected handler's, yet the Transport takes it for the first
// hop's operation (as it does for a target the table does not know) and
// retries it on a 503: the unprotected handler runs again.
func TestAttackRedirectToUnprotectedIsRetried(t *testing.T) {
	capture := Operation{ID: "capture", Method: http.MethodPost, Path: "/pay/{id}",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour}
	batch := Operation{ID: "batch", Method: http.MethodPost, Path: "/pay/batch", Unprotected: true}
	s := &script{answers: []func(*http.Request) (*http.Response, error){
		answer(http.StatusTemporaryRedirect, http.Header{"Location": {"/pay/batch"}}, ""),
		answer(http.StatusServiceUnavailable, nil, ""),
		answer(http.StatusServiceUnavailable, nil, ""),
		answer(http.StatusOK, nil, ""),
	}}
	tr, _ := newTest(t, s, Config{Operations: []Operation{capture, batch}, MaxAttempts: 3})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://h/pay/p1", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.Client().Do(req)
	if err == nil {
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
	}
	var toBatch int
	for _, g := range s.got {
		if g.path == "/pay/batch" {
			toBatch++
			if g.key != "" {
				t.Errorf("the unprotected POST /pay/batch carried the key %q; want none", g.key)
			}
		}
	}
	if toBatch != 1 {
		t.Errorf("the unprotected POST /pay/batch was sent %d times after the redirect (%+v); want once", toBatch, s.got)
	}
}
