package idem_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestSweepDeletesExpiredKeysInBatches(t *testing.T) {
	c := storetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	store := memstore.New(memstore.WithClock(c.Now))
	ctx := context.Background()
	claim := func(key string, ttl time.Duration) {
		t.Helper()
		res, err := store.Claim(ctx, idemstore.Claim{
			Identity: idemstore.Identity{Tenant: "t", Scope: "op", Key: key}, Operation: "op",
			Fingerprint: []byte{1}, Token: "tok", Lease: time.Second, TTL: ttl, OnLeaseExpiry: idemstore.FailClosed,
		})
		if err != nil || !res.Won {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
	}
	for i := range 25 {
		claim("old"+strings.Repeat("x", i), time.Minute)
	}
	claim("young", time.Hour)
	c.Advance(2 * time.Minute)

	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	var logs bytes.Buffer
	go func() {
		done <- idem.Sweep(sctx, store, idem.SweepConfig{Every: time.Hour, Batch: 10, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	// The first sweep runs at once and keeps going while batches come back
	// full: 10 + 10 + 5.
	deadline := time.Now().Add(5 * time.Second)
	for store.Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Sweep returned %v, want context.Canceled", err)
	}
	if store.Len() != 1 {
		t.Fatalf("%d keys left, want only the unexpired one", store.Len())
	}
	if !strings.Contains(logs.String(), "deleted=25") {
		t.Fatalf("sweep log does not report 25 deletions: %s", logs.String())
	}
}

func TestLogsRedactKeys(t *testing.T) {
	var logs bytes.Buffer
	e, err := idem.New(idem.Config{
		Store:    failing{memstore.New()},
		Policies: []idem.Policy{transferPolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", "customer-4711-secret")
	e.Middleware(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), r)
	if !strings.Contains(logs.String(), "key=hmac:") {
		t.Fatalf("store failure not logged with a hashed key: %s", logs.String())
	}
	if strings.Contains(logs.String(), "customer-4711-secret") {
		t.Fatalf("log carries the raw key: %s", logs.String())
	}
}
