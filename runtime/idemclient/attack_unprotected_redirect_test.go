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

// POST /files/v{version} has no policy and is more specific than the
// protected POST /files/{name}, but no router gives {version} an empty
// value at the end of the path: chi serves "/files/v" with upload's
// handler, and the engine applies upload's policy, whose key is
// required. The Transport reads the path as they do (runtime/pathtemplate)
// and sends the key; "/files/v2" is the unprotected route's, sent once
// with none.
func TestEmptyLastParamIsNoUnprotectedRoute(t *testing.T) {
	upload := Operation{ID: "upload", Method: http.MethodPost, Path: "/files/{name}",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour}
	version := Operation{ID: "uploadVersion", Method: http.MethodPost, Path: "/files/v{version}", Unprotected: true}
	for _, c := range []struct {
		path    string
		withKey bool
	}{{"/files/v", true}, {"/files/v2", false}} {
		s := &script{answers: []func(*http.Request) (*http.Response, error){answer(http.StatusCreated, nil, "")}}
		tr, _ := newTest(t, s, Config{Operations: []Operation{upload, version}})
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://h"+c.path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := tr.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(res.Body)
		_ = res.Body.Close()
		if len(s.got) != 1 || (s.got[0].key != "") != c.withKey {
			t.Errorf("POST %s: sent %+v; want one attempt, with a key: %v", c.path, s.got, c.withKey)
		}
	}
}
