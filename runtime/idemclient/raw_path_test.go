package idemclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// A URL whose RawPath is no valid spelling of its Path (a byte beyond
// ASCII beside "%2F") is not sent as written: net/http's client sends
// URL.EscapedPath, where the decoded "/" separates segments. The Transport
// matches the path that goes on the wire (pathtemplate.RequestPath), as
// the server's router will read it: here the protected
// /accounts/{id}/{sub}, which gets its key, not the unprotected
// /accounts/{id} that RawPath spells.
func TestRawPathIsMatchedAsSent(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.RequestURI+" key="+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	sub := Operation{ID: "sub", Method: http.MethodPost, Path: "/accounts/{id}/{sub}",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour}
	one := Operation{ID: "one", Method: http.MethodPost, Path: "/accounts/{id}", Unprotected: true}
	tr, err := New(Config{Operations: []Operation{sub, one}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Path, req.URL.RawPath = "/accounts/é/a", "/accounts/é%2Fa"
	req.Header.Set("Content-Type", "application/json")
	res, err := tr.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	const sent = "/accounts/%C3%A9/a key="
	if len(got) != 1 || !strings.HasPrefix(got[0], sent) || got[0] == sent {
		t.Fatalf("sent %q; want POST /accounts/%%C3%%A9/a once, with a key", got)
	}
}
