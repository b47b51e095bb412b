package idem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Without a Sealer a stored answer is kept as the handler wrote it
// (docs/semantics.md §6.2). One whose body begins as a sealed answer does
// (an endpoint that echoes what the client sent, an upload's bytes) is
// replayed as it was answered, not taken for a seal and lost.
func TestUnsealedAnswerThatBeginsAsASealedOneIsReplayed(t *testing.T) {
	for _, body := range []string{
		"\x00idem-sealed\x01\x05k-id-whatever",
		"\x00idem-sealed\x01\x00escaped already",
		"\x00idem-sealed\x01",
	} {
		e, err := idem.New(idem.Config{
			Store:    memstore.New(),
			Policies: []idem.Policy{idemtest.Policy("echo", "/echo")},
			Tenant:   idem.SingleTenant("acme"),
		})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(body))
		}))
		for run := 1; run <= 2; run++ {
			r := httptest.NewRequest(http.MethodPost, "/echo", strings.NewReader(`{}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated || w.Body.String() != body {
				t.Fatalf("body %q, request %d: %d %q; want the 201 the handler answered (handler ran %d times)", body, run, w.Code, w.Body.String(), calls)
			}
		}
		if calls != 1 {
			t.Fatalf("body %q: the handler ran %d times, want 1", body, calls)
		}
	}
}

// Without a Sealer a phase's result is stored as given (docs/semantics.md
// §8.2). One that begins as a sealed result does (a downstream's binary
// answer) is handed back, on the run that recorded it and on every later
// one, not taken for a seal that fails the phase after the charge.
func TestUnsealedPhaseResultThatBeginsAsASealedOneIsReturned(t *testing.T) {
	for _, result := range [][]byte{
		[]byte("\x00idem-sealed-phase\x01\x05k-id-ch_1"),
		[]byte("\x00idem-sealed-phase\x01\x00ch_2"),
		[]byte("\x00idem-sealed-phase\x01"),
	} {
		e, err := idem.New(idem.Config{
			Store:    memstore.New(),
			Policies: []idem.Policy{idemtest.Policy("charge", "/charges")},
			Tenant:   idem.SingleTenant("acme"),
		})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := idem.Phase(r.Context(), "charge", func(context.Context, string) ([]byte, error) {
				calls++
				return result, nil
			})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			// Released: the retry runs the handler and meets the record.
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(res)
		}))
		for run := 1; run <= 2; run++ {
			w := postCharge(h, "k-1", "")
			if w.Code != http.StatusInternalServerError || w.Body.String() != string(result) {
				t.Fatalf("result %q, run %d: %d %q; want the phase's result as run returned it (charged %d times)", result, run, w.Code, w.Body.String(), calls)
			}
		}
		if calls != 1 {
			t.Fatalf("result %q: the downstream was called %d times, want 1", result, calls)
		}
	}
}
