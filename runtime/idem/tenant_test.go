package idem_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// A service without tenants protects its requests with one line; an empty
// name resolves no tenant, so its requests are refused, not keyed under "".
func TestSingleTenant(t *testing.T) {
	var runs atomic.Int64
	e, err := idem.New(idem.Config{Store: memstore.New(), Policies: []idem.Policy{transferPolicy()}, Tenant: idem.SingleTenant("default")})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Middleware(created(&runs))
	post(t, h, "/transfers", "k")
	if w := post(t, h, "/transfers", "k"); w.Header().Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("retry: %d replayed=%q after %d runs, want a replay after 1", w.Code, w.Header().Get("Idempotent-Replayed"), runs.Load())
	}

	e, err = idem.New(idem.Config{Store: memstore.New(), Policies: []idem.Policy{transferPolicy()}, Tenant: idem.SingleTenant("")})
	if err != nil {
		t.Fatal(err)
	}
	if w := post(t, e.Middleware(created(&runs)), "/transfers", "k"); w.Code != http.StatusInternalServerError || runs.Load() != 1 {
		t.Fatalf("empty tenant name: %d after %d runs, want 500 and no run", w.Code, runs.Load())
	}

	_, err = idem.New(idem.Config{Store: memstore.New(), Policies: []idem.Policy{transferPolicy()}})
	if err == nil || !strings.Contains(err.Error(), "SingleTenant") {
		t.Fatalf("no Tenant: %v, want an error that names SingleTenant", err)
	}
}

// Without a Logger the engine logs through slog.Default(), so that the
// errors docs/runtime.md tells operators to watch are not discarded.
func TestEngineLogsThroughTheDefaultLogger(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	if _, err := idem.New(idem.Config{Store: memstore.New(), Policies: []idem.Policy{transferPolicy()}, Tenant: idem.SingleTenant("default")}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "KeyLabelSecret is not set") {
		t.Fatalf("default logger got %q, want the engine's start-up line", buf.String())
	}
}
