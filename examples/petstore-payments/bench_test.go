package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkTransferIdempotency measures what idempotency costs the example
// end to end: real server processes over HTTP against PostgreSQL, 16
// clients each sending new transfers with fresh Idempotency-Keys, one
// server with --idempotency=on and one with --idempotency=off. Every
// iteration of b.Loop is one round: a batch of transfers through each
// server, the order swapped every round so that neither side always runs
// on a warmer database. The reported x-vs-off is the median over the
// rounds of on's throughput ÷ off's (the target is at least 0.9), so that
// a burst of load from elsewhere moves single rounds, not the result:
//
//	IDEMGEN_TEST_DATABASE_URL=postgres://… go test -run '^$' -bench TransferIdempotency -benchtime 10x .
//
// The built-in ns/op would be a round's time and is suppressed; on-ns/op
// and off-ns/op are the medians of each side's wall-clock time per
// transfer.
func BenchmarkTransferIdempotency(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: the end-to-end benchmark starts two servers and runs thousands of transfers")
	}
	dbURL := postgresURL(b)
	// Both servers share the database, so both write to tables of the same
	// size; they start one after the other because each applies the
	// migrations at start.
	on := startServer(b, dbURL, "--idempotency=on")
	off := startServer(b, dbURL, "--idempotency=off")
	// One client's transport serves both servers: it keeps one connection
	// per client and server alive, so no round pays for dialling.
	hc := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: benchClients, DisableCompression: true},
	}
	defer hc.CloseIdleConnections()
	// Each client moves money between two accounts of its own: clients
	// sharing an account would wait on its row lock, and the benchmark
	// would measure that queue, the same in both modes.
	pairs := make([][2]string, benchClients)
	for i := range pairs {
		for j := range pairs[i] {
			pairs[i][j] = benchAccount(b, hc, on.URL)
		}
	}
	var seq atomic.Int64
	side := func(s *server) float64 {
		return benchRound(b, hc, s.URL, pairs, &seq)
	}
	var onNs, offNs, ratios []float64
	for round := 0; b.Loop(); round++ {
		var x, y float64
		if round%2 == 0 {
			y = side(off)
			x = side(on)
		} else {
			x = side(on)
			y = side(off)
		}
		onNs, offNs, ratios = append(onNs, x), append(offNs, y), append(ratios, y/x)
	}
	if b.Failed() {
		return
	}
	ratio := median(ratios)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(offNs), "off-ns/op")
	b.ReportMetric(median(onNs), "on-ns/op")
	b.ReportMetric(ratio, "x-vs-off")
	b.Logf("%d rounds of %d transfers from %d clients; median off %.0f ns/transfer, on %.0f ns/transfer; median throughput ratio on/off = %.2f (target >= 0.90)",
		len(ratios), benchTransfers, benchClients, median(offNs), median(onNs), ratio)
}

const (
	// benchClients is the number of clients sending at once.
	benchClients = 16
	// benchTransfers is the number of transfers of each side in one round.
	benchTransfers = 1600
)

// benchAccount opens an account with enough money for every transfer the
// benchmark can make from it.
func benchAccount(b *testing.B, hc *http.Client, base string) string {
	b.Helper()
	c := &client{base: base, apiKey: keyAcme, http: hc}
	r, err := c.do("POST", "/accounts", "", `{"owner":"bench","currency":"EUR","initial_balance":1000000000000}`)
	if err != nil || r.Status != http.StatusCreated {
		b.Fatalf("open account: %s %v", r, err)
	}
	var a struct{ ID string }
	if err := json.Unmarshal(r.Body, &a); err != nil || a.ID == "" {
		b.Fatalf("open account: %s %v", r, err)
	}
	return a.ID
}

// benchRound sends benchTransfers new transfers to base from benchClients
// clients and returns the wall-clock nanoseconds per transfer. Every
// transfer carries a key never sent before, so each one is a new key.
func benchRound(b *testing.B, hc *http.Client, base string, pairs [][2]string, seq *atomic.Int64) float64 {
	var sent atomic.Int64
	var wg sync.WaitGroup
	c := &client{base: base, apiKey: keyAcme, http: hc}
	start := time.Now()
	for _, p := range pairs {
		body := transferBody(p[0], p[1], 1, "bench")
		wg.Go(func() {
			for sent.Add(1) <= benchTransfers {
				key := "bench-" + strconv.FormatInt(seq.Add(1), 10)
				r, err := c.do("POST", "/transfers", key, body)
				if err == nil && r.Status != http.StatusCreated {
					err = fmt.Errorf("got %s, want 201", r)
				}
				if err != nil {
					b.Errorf("transfer: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / benchTransfers
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
