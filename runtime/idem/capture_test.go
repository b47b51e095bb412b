package idem_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The writer the engine hands a handler is the request's only while the
// handler runs. A handler that keeps it (a goroutine it started, or a
// router's context object that a handler outliving its request still
// holds) writes nowhere once it has returned: not into the answer the
// engine stored, nor into the writer under it, which a router may already
// have handed to another request, whether the answer was held back for
// storing or, larger than the snapshot limit, streamed on.
func TestWritesAfterTheHandlerReturnedGoNowhere(t *testing.T) {
	p := transferPolicy()
	p.MaxSnapshotBytes = 16
	e := newEngine(t, idem.Config{Policies: []idem.Policy{p}})
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"held-back", []byte(`{"id":"tr_1"}`)},
		{"streamed-on", bytes.Repeat([]byte("x"), 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kept http.ResponseWriter
			h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				kept = w
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(tc.body)
			}))
			key := "k-" + tc.name
			first := post(t, h, "/transfers", key)
			if first.Code != http.StatusCreated || !bytes.Equal(first.Body.Bytes(), tc.body) {
				t.Fatalf("first: %d %q, want 201 %q", first.Code, first.Body, tc.body)
			}
			kept.Header().Set("X-Late", "1")
			kept.WriteHeader(http.StatusAccepted)
			if n, err := kept.Write([]byte("late")); n != 0 || err == nil {
				t.Errorf("a write after the handler returned = %d, %v; want 0 and an error", n, err)
			}
			if !bytes.Equal(first.Body.Bytes(), tc.body) || first.Header().Get("X-Late") != "" {
				t.Errorf("the writer under the engine's got the late write: %q %v", first.Body, first.Header())
			}
			again := post(t, h, "/transfers", key)
			if again.Header().Get("Idempotent-Replayed") != "true" {
				return // an answer larger than the snapshot is not replayed
			}
			if again.Code != http.StatusCreated || !bytes.Equal(again.Body.Bytes(), tc.body) {
				t.Errorf("replay: %d %q, want 201 %q", again.Code, again.Body, tc.body)
			}
		})
	}
}
