package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/internal/tcpproxy"
)

// BenchmarkTransferIdempotency measures the example end to end, over HTTP
// against PostgreSQL, from 16 clients, three ways in one run: idemgen's
// layer (--idempotency=on), the key table a strong team writes by hand
// (--idempotency=handwritten), and no protection (--idempotency=off).
// Two workloads: new transfers, each under a key never sent before, and
// replays, retries of transfers completed before the rounds (the server
// without idempotency runs each retry as a new transfer). Two settings,
// each a sub-benchmark with its own database and servers:
//
//   - cpu-bound: the servers reach PostgreSQL directly, and everything
//     shares this machine's cores;
//   - network: they reach it through a proxy that delays every byte by
//     0.25 ms each way, a database one network hop away.
//
// Every iteration of b.Loop is one round: a batch of each workload through
// each server, the servers' order turned every round so that none always
// runs first on a colder or last on a warmer database. Each round's ratios
// are logged; the reported metrics are the medians over the rounds of
// idemgen's throughput ÷ the hand-written table's and ÷ no protection's,
// so that a burst of load from elsewhere moves single rounds, not the
// result (-v keeps every round's line; without it the log is cut short):
//
//	IDEMGEN_TEST_DATABASE_URL=postgres://… go test -v -run '^$' -bench TransferIdempotency -benchtime 8x -timeout 60m .
//
// The built-in ns/op would be a round's time and is suppressed.
func BenchmarkTransferIdempotency(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: the end-to-end benchmark starts six servers and runs thousands of transfers")
	}
	b.Run("cpu-bound", func(b *testing.B) { benchSetting(b, 0) })
	b.Run("network", func(b *testing.B) { benchSetting(b, benchHop) })
}

const (
	// benchClients is the number of clients sending at once.
	benchClients = 16
	// benchTransfers is the number of requests of each side and workload
	// in one round.
	benchTransfers = 800
	// benchReplayKeys is the number of completed keys each client retries
	// in the replay workload, in turn.
	benchReplayKeys = 20
	// benchHop is the network setting's delay each way.
	benchHop = 250 * time.Microsecond
	// benchAdmission admits every client's request at once: the benchmark
	// measures throughput, not how a server sheds a load it cannot take
	// (with the default of 8 in flight, 16 clients keep the admission
	// queue congested, and a loaded machine has requests refused).
	benchAdmission = "--max-in-flight=16"
)

// benchSide is one server of the comparison.
type benchSide struct {
	name string
	// mode is the server's --idempotency.
	mode string
	srv  *labtest.Server
	cpu  *cpuMeter
	// replays says whether a retry is answered from the stored response.
	replays bool
}

// The workloads of a round, in the order they run.
var benchWorkloads = []string{"new", "replay"}

// benchSetting runs the rounds of one setting: hop is the delay each way
// between the servers and PostgreSQL, none when 0.
func benchSetting(b *testing.B, hop time.Duration) {
	dbURL := labtest.PostgresURL(b)
	serverURL := dbURL
	if hop > 0 {
		serverURL = throughDelay(b, dbURL, hop)
	}
	// The servers share the database, so all write to tables of the same
	// size; they start one after the other because each applies the
	// migrations at start.
	sides := []*benchSide{
		{name: "idemgen", mode: "on", replays: true},
		{name: "handwritten", mode: "handwritten", replays: true},
		{name: "off", mode: "off"},
	}
	for _, s := range sides {
		app := "bench-" + s.name
		s.srv = bins.StartLab(b, withApplicationName(b, serverURL, app), "--idempotency="+s.mode, benchAdmission)
		s.cpu = newCPUMeter(b, dbURL, app, s.srv)
	}
	// One transport serves every server: it keeps one connection per
	// client and server alive, so no round pays for dialling.
	hc := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: benchClients, DisableCompression: true},
	}
	defer hc.CloseIdleConnections()
	// Each client moves money between two accounts of its own: clients
	// sharing an account would wait on its row lock, and the benchmark
	// would measure that queue, the same on every side.
	pairs := make([][2]string, benchClients)
	for i := range pairs {
		for j := range pairs[i] {
			pairs[i][j] = benchAccount(b, hc, sides[0].srv.URL)
		}
	}
	for _, s := range sides {
		benchCompleteReplayKeys(b, hc, s, pairs)
	}
	var seq atomic.Int64
	// ns[workload][side] holds each round's nanoseconds per request, and
	// cpu[workload][side] the CPU time each request cost its side.
	ns := map[string]map[string][]float64{}
	cpu := map[string]map[string][]cpuUse{}
	for _, w := range benchWorkloads {
		ns[w] = map[string][]float64{}
		cpu[w] = map[string][]cpuUse{}
	}
	for round := 0; b.Loop(); round++ {
		order := benchOrder(sides, round)
		for _, w := range benchWorkloads {
			for _, s := range order {
				var t float64
				before := s.cpu.read(b)
				if w == "new" {
					t = benchRound(b, hc, s, pairs, func(int, int) string { return "bench-" + strconv.FormatInt(seq.Add(1), 10) }, false)
				} else {
					t = benchRound(b, hc, s, pairs, benchReplayKey(s), s.replays)
				}
				ns[w][s.name] = append(ns[w][s.name], t)
				cpu[w][s.name] = append(cpu[w][s.name], perRequest(s.cpu.read(b).sub(before)))
			}
			last := func(side string) float64 { return ns[w][side][len(ns[w][side])-1] }
			b.Logf("round %d, %s: µs per request idemgen %.0f, handwritten %.0f, off %.0f; idemgen's throughput %.2f× the hand-written table's, %.2f× off's",
				round, w, last("idemgen")/1e3, last("handwritten")/1e3, last("off")/1e3,
				last("handwritten")/last("idemgen"), last("off")/last("idemgen"))
			b.Logf("round %d, %s: %s", round, w, cpuLine(cpu[w], func(u []cpuUse) cpuUse { return u[len(u)-1] }))
		}
	}
	if b.Failed() {
		return
	}
	b.ReportMetric(0, "ns/op")
	for _, w := range benchWorkloads {
		vsHand := medianRatio(ns[w]["handwritten"], ns[w]["idemgen"])
		vsOff := medianRatio(ns[w]["off"], ns[w]["idemgen"])
		b.ReportMetric(vsHand, w+"-x-vs-handwritten")
		b.ReportMetric(vsOff, w+"-x-vs-off")
		b.Logf("%s, median of %d rounds of %d requests from %d clients: µs per request idemgen %.0f, handwritten %.0f, off %.0f; idemgen's throughput %.2f× the hand-written table's, %.2f× off's",
			w, len(ns[w]["idemgen"]), benchTransfers, benchClients, median(ns[w]["idemgen"])/1e3,
			median(ns[w]["handwritten"])/1e3, median(ns[w]["off"])/1e3, vsHand, vsOff)
		b.Logf("%s, medians: %s", w, cpuLine(cpu[w], medianUse))
	}
}

// benchOrder is the order the sides run in round: every one of the six
// orders of three sides in turn.
func benchOrder(sides []*benchSide, round int) []*benchSide {
	order := slices.Clone(sides)
	k := round % len(order)
	order = append(order[k:], order[:k]...)
	if (round/len(order))%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// medianRatio is the median over the rounds of base[i] ÷ x[i].
func medianRatio(base, x []float64) float64 {
	r := make([]float64, len(x))
	for i := range x {
		r[i] = base[i] / x[i]
	}
	return median(r)
}

// benchReplayKey returns the key of a client's i-th request in the replay
// workload: one of the keys completed before the rounds, in turn.
func benchReplayKey(s *benchSide) func(client, i int) string {
	return func(client, i int) string {
		return fmt.Sprintf("replay-%s-%d-%d", s.name, client, i%benchReplayKeys)
	}
}

// benchCompleteReplayKeys sends every key of the replay workload to s
// once, so that the rounds retry completed transfers.
func benchCompleteReplayKeys(b *testing.B, hc *http.Client, s *benchSide, pairs [][2]string) {
	b.Helper()
	c := &labtest.Client{Base: s.srv.URL, APIKey: labtest.KeyAcme, HTTP: hc}
	key := benchReplayKey(s)
	for i, p := range pairs {
		for j := range benchReplayKeys {
			r, err := c.Do("POST", "/transfers", key(i, j), labtest.TransferBody(p[0], p[1], 1, "bench"))
			if err != nil || r.Status != http.StatusCreated {
				b.Fatalf("%s: complete a key for the replays: %s %v", s.name, r, err)
			}
		}
	}
}

// benchAccount opens an account with enough money for every transfer the
// benchmark can make from it.
func benchAccount(b *testing.B, hc *http.Client, base string) string {
	b.Helper()
	c := &labtest.Client{Base: base, APIKey: labtest.KeyAcme, HTTP: hc}
	r, err := c.Do("POST", "/accounts", "", `{"owner":"bench","currency":"EUR","initial_balance":1000000000000}`)
	if err != nil || r.Status != http.StatusCreated {
		b.Fatalf("open account: %s %v", r, err)
	}
	var a struct{ ID string }
	if err := json.Unmarshal(r.Body, &a); err != nil || a.ID == "" {
		b.Fatalf("open account: %s %v", r, err)
	}
	return a.ID
}

// benchRound sends benchTransfers transfers to s from benchClients
// clients, client i's n-th under key(i, n), and returns the wall-clock
// nanoseconds per transfer. Every answer must be 201, and a replay when
// replay is set.
func benchRound(b *testing.B, hc *http.Client, s *benchSide, pairs [][2]string, key func(client, n int) string, replay bool) float64 {
	var sent atomic.Int64
	var wg sync.WaitGroup
	c := &labtest.Client{Base: s.srv.URL, APIKey: labtest.KeyAcme, HTTP: hc}
	start := time.Now()
	for i, p := range pairs {
		body := labtest.TransferBody(p[0], p[1], 1, "bench")
		wg.Go(func() {
			for n := 0; sent.Add(1) <= benchTransfers; n++ {
				r, err := c.Do("POST", "/transfers", key(i, n), body)
				if err == nil && r.Status != http.StatusCreated {
					err = fmt.Errorf("got %s, want 201", r)
				}
				if err == nil && replay && r.Header.Get("Idempotent-Replayed") != "true" {
					err = fmt.Errorf("a retry of a completed key ran again: %s", r)
				}
				if err != nil {
					b.Errorf("%s: transfer: %v", s.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / benchTransfers
}

// throughDelay returns dbURL with its host replaced by a proxy that
// delays every byte by hop each way, and logs the round trip of a
// trivial query both ways, as measured.
func throughDelay(b *testing.B, dbURL string, hop time.Duration) string {
	b.Helper()
	p, u := tcpproxy.NewForURL(b, dbURL, "5432")
	p.SetDelay(hop)
	proxied := u.String()
	b.Logf("PostgreSQL through a proxy delaying each way by %v: a round trip of SELECT 1 takes %v directly and %v through it (medians of 200)",
		hop, selectOneRTT(b, dbURL), selectOneRTT(b, proxied))
	return proxied
}

// selectOneRTT is the median time of a prepared SELECT 1 on one
// connection to dbURL.
func selectOneRTT(b *testing.B, dbURL string) time.Duration {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	ts := make([]float64, 200)
	for i := range ts {
		start := time.Now()
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			b.Fatal(err)
		}
		ts[i] = float64(time.Since(start))
	}
	return time.Duration(median(ts)).Round(time.Microsecond)
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}
