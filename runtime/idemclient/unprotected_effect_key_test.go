package idemclient

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/key"
)

// A handler that calls another service under the effect key of its own
// request (WithEffectKey) may call an operation the table marks
// Unprotected: POST /pay/batch beside a protected POST /pay/{id}. The
// server's router sends it to a handler no key protects, and docs/client.md
// promises that such a request is "sent once, with no key, never retried".
// The Transport still writes the effect key into its Idempotency-Key
// header, and net/http's Transport counts a POST that carries that header
// as safe to send again: when the reused connection it went out on breaks
// after the server read it, net/http sends it again on a new connection,
// and the unprotected handler runs twice.
func TestUnprotectedCallUnderEffectKeyIsSentOnceWithoutKey(t *testing.T) {
	var (
		mu      sync.Mutex
		batches []string // the Idempotency-Key of each POST /pay/batch received
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path != "/pay/batch" {
			w.WriteHeader(http.StatusOK)
			return
		}
		mu.Lock()
		batches = append(batches, r.Header.Get("Idempotency-Key"))
		n := len(batches)
		mu.Unlock()
		if n == 1 {
			// The handler ran; the connection breaks before its answer.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	capture := Operation{ID: "capture", Method: http.MethodPost, Path: "/pay/{id}",
		Key: Key{In: key.InHeader, Name: "Idempotency-Key"}, TTL: time.Hour}
	batch := Operation{ID: "batch", Method: http.MethodPost, Path: "/pay/batch", Unprotected: true}
	base := &http.Transport{MaxIdleConnsPerHost: 1}
	defer base.CloseIdleConnections()
	tr, err := New(Config{Operations: []Operation{capture, batch}, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	client := tr.Client()
	ctx := WithEffectKey(context.Background(), "0123456789abcdef0123456789abcdef01234567")

	// A first call leaves a connection idle, which the next call reuses.
	warm, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/pay/p1", nil)
	res, err := client.Do(warm)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay/batch", strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	if res, err := client.Do(req); err == nil {
		_, _ = io.ReadAll(res.Body)
		_ = res.Body.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	for i, k := range batches {
		if k != "" {
			t.Errorf("POST /pay/batch (Unprotected) attempt %d carried Idempotency-Key %q; docs/client.md: sent with no key", i+1, k)
		}
	}
	if len(batches) != 1 {
		t.Errorf("the unprotected handler of POST /pay/batch ran %d times for one call; docs/client.md: sent once, never retried", len(batches))
	}
}
