package idemclient_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemclient"
)

// HTTP methods are case-sensitive (RFC 9110 §9.1): "post" is not POST, and
// the engine applies no policy to it (docs/http.md: methods other than
// POST and PATCH pass through untouched), so a handler that serves it
// (a route registered without a method) runs it with nothing remembered.
// The Transport must then send it once, as it sends every request to no
// operation of the table (docs/client.md); it takes it for
// createTransfer instead, attaches a key that nothing reads and retries
// the 503, and the handler runs twice for one call.
func TestLowerCaseMethodIsNoOperationOfTheTable(t *testing.T) {
	var runs atomic.Int64
	srv := transferServer(t, false, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if runs.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	tr, err := idemclient.New(idemclient.Config{
		Operations: clientOps(), BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rep idemclient.Report
	ctx := idemclient.WithReport(context.Background(), &rep)
	req, err := http.NewRequestWithContext(ctx, "post", srv.URL+"/transfers", strings.NewReader(`{"amount":5}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if n := runs.Load(); n != 1 {
		t.Fatalf(`method "post": the handler, which the server runs without a policy, ran %d times for one call (%d attempts, key %q, status %d): the Transport took the request for createTransfer (POST) and retried it`,
			n, rep.Attempts, rep.Key, res.StatusCode)
	}
}
