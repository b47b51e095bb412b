package idem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
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
	run := func(h http.Handler, key func() string) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(reqBody))
				r.Header.Set("Content-Type", "application/json")
				if k := key(); k != "" {
					r.Header.Set("Idempotency-Key", k)
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
	}
	bare := testing.Benchmark(run(handler, func() string { return "" }))
	fresh := testing.Benchmark(run(protected, func() string { return fmt.Sprint("k", seq.Add(1)) }))
	replay := testing.Benchmark(run(protected, func() string { return "k1" }))

	b.ReportMetric(float64(bare.NsPerOp()), "bare-ns/op")
	b.ReportMetric(float64(fresh.NsPerOp()-bare.NsPerOp()), "new-key-overhead-ns/op")
	b.ReportMetric(float64(replay.NsPerOp()-bare.NsPerOp()), "replay-overhead-ns/op")
	b.ReportMetric(float64(fresh.AllocsPerOp()-bare.AllocsPerOp()), "new-key-extra-allocs/op")
	b.ReportMetric(float64(fresh.NsPerOp())/float64(bare.NsPerOp()), "new-key-x-bare")
	b.ReportMetric(float64(replay.NsPerOp())/float64(bare.NsPerOp()), "replay-x-bare")
	for b.Loop() {
		// The figures above are the result; the loop only satisfies the
		// benchmark protocol.
	}
}
