package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// claimFailing is a store whose every claim fails.
type claimFailing struct{ *memstore.Store }

func (claimFailing) Claim(context.Context, idemstore.Claim) (idemstore.Result, error) {
	return idemstore.Result{}, errors.New("the store is down")
}

// traceKey is a value a tracing middleware would put in the request's
// context.
type traceKey struct{}

// ctxHandler is a slog.Handler that records, for each message, the trace
// value of the context it was logged with.
type ctxHandler struct{ seen map[string]any }

func (h ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.seen[r.Message] = ctx.Value(traceKey{})
	return nil
}
func (h ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h ctxHandler) WithGroup(string) slog.Handler      { return h }

// The engine logs a request's troubles with the request's context, so a
// context-aware log handler (a tracing bridge) ties them to the request.
func TestLogsCarryTheRequestsContext(t *testing.T) {
	h := ctxHandler{seen: map[string]any{}}
	e := newEngine(t, idem.Config{
		Store:    claimFailing{memstore.New()},
		Policies: []idem.Policy{transferPolicy()},
		Logger:   slog.New(h),
	})
	srv := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran")
	}))
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), traceKey{}, "trace-1"))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "k1")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	found := false
	for msg, v := range h.seen {
		if strings.Contains(msg, "store failed") {
			found = true
			if v != "trace-1" {
				t.Errorf("%q was logged without the request's context", msg)
			}
		}
	}
	if !found {
		t.Errorf("no store failure logged; logged %v", h.seen)
	}
}
