package idem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/fingerprint"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// BenchmarkMiddlewareOverhead measures what the engine adds to a handler
// with the in-memory store, against the bare handler in the same run:
//
//	go test -run '^$' -bench MiddlewareOverhead ./runtime/idem
//
// It reports the overhead per request in ns and allocations, for a new key
// (claim, handler, complete) and for a replay.
func BenchmarkMiddlewareOverhead(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"tr_1","amount":1000,"currency":"EUR","from_account":"acc_1","to_account":"acc_2"}`)
	})
	engine, err := idem.New(idem.Config{
		Store:    memstore.New(),
		Policies: []idem.Policy{transferPolicy()},
		Tenant:   func(*http.Request) (string, bool) { return "acme", true },
	})
	if err != nil {
		b.Fatal(err)
	}
	protected := engine.Middleware(handler)
	const reqBody = `{"amount": 1000, "to": "acc_2", "from": "acc_1", "currency": "EUR", "memo": "rent"}`
	var seq atomic.Int64
	serve := func(h http.Handler, key string) {
		r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(reqBody))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	fresh := func() { serve(protected, fmt.Sprint("k", seq.Add(1))) }
	replay := func() { serve(protected, "k1") }
	bare := func() { serve(handler, "") }
	replay() // store k1 once

	// The three paths run interleaved, so that a change of machine load
	// during the run affects them alike.
	var tBare, tFresh, tReplay time.Duration
	timed := func(f func()) time.Duration { t := time.Now(); f(); return time.Since(t) }
	n := 0
	for b.Loop() {
		tBare += timed(bare)
		tFresh += timed(fresh)
		tReplay += timed(replay)
		n++
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(tBare), "bare-ns/req")
	b.ReportMetric(per(tFresh)-per(tBare), "new-key-overhead-ns/req")
	b.ReportMetric(per(tReplay)-per(tBare), "replay-overhead-ns/req")
	b.ReportMetric(per(tFresh)/per(tBare), "new-key-x-bare")
	b.ReportMetric(per(tReplay)/per(tBare), "replay-x-bare")
	b.ReportMetric(testing.AllocsPerRun(100, fresh)-testing.AllocsPerRun(100, bare), "new-key-extra-allocs/req")
	b.ReportMetric(testing.AllocsPerRun(100, replay)-testing.AllocsPerRun(100, bare), "replay-extra-allocs/req")
}

// BenchmarkFingerprintHMAC measures what Config.Secrets add to a request's
// fingerprint and key, against the unkeyed fingerprint in the same run:
//
//	go test -run '^$' -bench FingerprintHMAC ./runtime/idem
//
// It reports the time of the plain SHA-256 fingerprint of the example
// transfer, of the same fingerprint keyed and the key stored as its HMAC,
// and their ratio.
func BenchmarkFingerprintHMAC(b *testing.B) {
	fp, err := fingerprint.Compile(transferPolicy().Fingerprint)
	if err != nil {
		b.Fatal(err)
	}
	in := fingerprint.Input{MediaType: "application/json", Body: []byte(`{"amount": 1000, "to": "acc_2", "from": "acc_1", "currency": "EUR", "memo": "rent"}`)}
	secret := []byte("0123456789abcdef0123456789abcdef")
	plain := func() { _, _ = fp.Sum(in) }
	keyed := func() {
		sum, _ := fp.Sum(in)
		_ = idemstore.StoredFingerprint(secret, sum)
		_ = idemstore.StoredKey(secret, "order-4711-customer-0042")
	}
	var tPlain, tKeyed time.Duration
	n := 0
	for b.Loop() {
		t := time.Now()
		plain()
		tPlain += time.Since(t)
		t = time.Now()
		keyed()
		tKeyed += time.Since(t)
		n++
	}
	b.ReportMetric(float64(tPlain.Nanoseconds())/float64(n), "sha256-ns/op")
	b.ReportMetric(float64(tKeyed.Nanoseconds())/float64(n), "hmac-ns/op")
	b.ReportMetric(float64(tKeyed)/float64(tPlain), "hmac-x-sha256")
}
