package overhead_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idem/idemtest"
	"github.com/idemgen/idemgen/runtime/problem"
)

// BenchmarkStoreOverhead measures, per store, what the engine adds to one
// request over HTTP, against the same handler unprotected in the same run:
//
//	go test ./runtime/internal/overhead -run '^$' -bench StoreOverhead -benchtime 7x
//
// Each store has two workloads: a new key (a fresh Idempotency-Key per
// request: claim, handler, completion) and a replay (retries of keys
// completed before the measurement: the claim meets the stored answer).
// Every iteration of b.Loop is one round, which measures both sides of a
// workload in short turns, the side that starts alternating from turn to
// turn and from round to round: the latency of 500 requests a side sent
// one after the other by one client (p50 and p99), then the throughput of
// 2,000 requests a side sent by 16 clients at once. Each figure is the median over the rounds; each
// ratio, protected ÷ unprotected, the median of the rounds' ratios, so
// that load from elsewhere on the machine moves single rounds, not the
// result. Each workload logs its line of the table docs/benchmarks.md
// publishes; with -v the whole table follows.
func BenchmarkStoreOverhead(b *testing.B) {
	var rows []row
	for _, st := range stores() {
		b.Run(st.name, func(b *testing.B) {
			r := newRig(b, st.open)
			for _, w := range workloads {
				b.Run(w.name, func(b *testing.B) {
					// Connections, pools and caches warm on both sides
					// before anything is timed.
					if _, err := r.round(w, warmSizes, unprotected); err != nil {
						b.Fatal(err)
					}
					var rounds []round
					for b.Loop() {
						rd, err := r.round(w, benchSizes, side(len(rounds)%2))
						if err != nil {
							b.Fatal(err)
						}
						rounds = append(rounds, rd)
					}
					r.checkRuns(b)
					rw := summarize(st.name, w, rounds)
					rw.report(b)
					b.Log(rw.line())
					rows = append(rows, rw)
				})
			}
		})
	}
	if len(rows) > 0 {
		b.Log(table(rows)) // a benchmark with sub-benchmarks shows its log under -v only
	}
}

// TestStoreOverheadRound runs one round of the benchmark per store and
// workload with a handful of requests, so that the benchmark keeps
// working: every answer is a 201, every protected retry of a completed key
// is that key's answer replayed byte for byte, and the handler ran once
// for each unprotected request and each new key, never for a replay.
func TestStoreOverheadRound(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			r := newRig(t, st.open)
			for i, w := range workloads {
				rd, err := r.round(w, testSizes, side(i%2))
				if err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				for s := range rd.rps {
					if rd.p50[s] <= 0 || rd.p99[s] < rd.p50[s] || rd.rps[s] <= 0 {
						t.Errorf("%s, %s: p50 %v, p99 %v, %.0f requests/s", w.name, side(s), rd.p50[s], rd.p99[s], rd.rps[s])
					}
				}
			}
			r.checkRuns(t)
		})
	}
}

// transferBody is the request both sides send.
const transferBody = `{"amount": 1000, "to": "acc_2", "from": "acc_1", "currency": "EUR", "memo": "rent"}`

// clients is the number of clients that send the throughput measurement's
// requests at once.
const clients = 16

// seedKeys is the number of keys the replay workload retries, in turn.
const seedKeys = 64

// sizes says how many requests each side sends in one round: turns turns
// of latency requests one after the other, then turns turns of throughput
// requests from all the clients.
type sizes struct{ turns, latency, throughput int }

var (
	// benchSizes makes the p99 of a round the sixth slowest of its 500
	// requests, and gives each of the 16 clients 125 requests to send.
	benchSizes = sizes{turns: 4, latency: 125, throughput: 500}
	warmSizes  = sizes{turns: 2, latency: 25, throughput: 2 * clients}
	testSizes  = sizes{turns: 2, latency: 3, throughput: clients}
)

// workload is what the protected side's requests meet.
type workload struct {
	name string
	// replay sends retries of the keys completed before the measurement;
	// otherwise every request has a fresh key.
	replay bool
}

var workloads = []workload{{"new-key", false}, {"replay", true}}

// side is a server the requests go to: the handler alone, or the engine
// in front of it.
type side int

const (
	unprotected side = iota
	protected
)

func (s side) String() string { return [...]string{"unprotected", "protected"}[s] }

// transfers is the handler both sides serve: it reads the body and answers
// 201 with a small JSON transfer whose id is the number of its run, so that
// an answer tells which run it comes from. As it stands it writes nothing;
// the transactional row's sides wrap it with a write (serve).
type transfers struct{ runs atomic.Int64 }

func (h *transfers) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve(w, r, nil) }

// serve answers r, after write, when it is not nil, has stored the
// transfer under its id.
func (h *transfers) serve(w http.ResponseWriter, r *http.Request, write func(ctx context.Context, id string) error) {
	if _, err := new(bytes.Buffer).ReadFrom(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := "tr_" + strconv.FormatInt(h.runs.Add(1), 10)
	if write != nil {
		if err := write(r.Context(), id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/transfers/"+id)
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"id":%q,"amount":1000,"currency":"EUR","from_account":"acc_1","to_account":"acc_2","status":"pending"}`, id)
}

// rig serves a backend's two sides on two loopback HTTP servers, the
// protected one behind an engine over its store, and sends both the same
// requests through one net/http client. It counts the handler runs that the
// answers account for, so that a replay that ran the handler is caught.
type rig struct {
	handler transfers
	url     [2]string
	client  *http.Client
	// fresh numbers the new keys.
	fresh atomic.Int64
	// seeded are the keys the replay workload retries, and answers the
	// body of each one's first answer; both are written before any round.
	seeded  []string
	answers map[string][]byte
	// wantRuns is how many handler runs the answers so far account for.
	wantRuns atomic.Int64
	// written counts the transfers the handler stored, when it stores any.
	written func() (int64, error)
}

// newRig opens a backend on the handler and serves its sides, the
// protected one behind an engine with the policy idemgen generates for a
// POST with a required key, and completes the keys the replay workload
// retries.
func newRig(tb testing.TB, open func(testing.TB, *transfers) backend) *rig {
	tb.Helper()
	r := &rig{answers: make(map[string][]byte, seedKeys)}
	be := open(tb, &r.handler)
	r.written = be.written
	labels := make([]byte, 32)
	_, _ = rand.Read(labels)
	engine, err := idem.New(idem.Config{
		Store: be.store,
		Policies: []idem.Policy{idemtest.Policy("createTransfer", "/transfers", func(p *idem.Policy) {
			p.Transactional = be.transactional
		})},
		Tenant:         idem.SingleTenant("acme"),
		KeyLabelSecret: labels,
	})
	if err != nil {
		tb.Fatal(err)
	}
	bare := httptest.NewServer(be.unprotected)
	guarded := httptest.NewServer(engine.Middleware(be.protected))
	r.url = [2]string{bare.URL + "/transfers", guarded.URL + "/transfers"}
	tr := &http.Transport{MaxIdleConns: 4 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	r.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	tb.Cleanup(func() {
		tr.CloseIdleConnections()
		bare.Close()
		guarded.Close()
	})
	var buf bytes.Buffer
	for range seedKeys {
		k := r.key(workload{}, 0)
		if err := r.post(protected, k, false, &buf); err != nil {
			tb.Fatalf("complete the keys to replay: %v", err)
		}
		r.seeded = append(r.seeded, k)
		r.answers[k] = bytes.Clone(buf.Bytes())
	}
	return r
}

// key returns the key of w's i-th request: a fresh one, or one of the
// seeded keys in turn.
func (r *rig) key(w workload, i int) string {
	if w.replay {
		return r.seeded[i%len(r.seeded)]
	}
	return "tr-" + strconv.FormatInt(r.fresh.Add(1), 10)
}

// post sends one request to side s under key and reads the answer into
// buf. It fails unless the answer is a 201 and, on the protected side, a
// replay exactly when replay is set, with the key's first answer as its
// body.
func (r *rig) post(s side, key string, replay bool, buf *bytes.Buffer) error {
	req, err := http.NewRequest(http.MethodPost, r.url[s], strings.NewReader(transferBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", s, key, err)
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", s, key, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s %s: %d %s", s, key, resp.StatusCode, buf)
	}
	replayed := resp.Header.Get(problem.ReplayedHeader) == "true"
	switch {
	case replayed != (s == protected && replay):
		return fmt.Errorf("%s %s: replayed %v, want %v", s, key, replayed, !replayed)
	case replayed && !bytes.Equal(buf.Bytes(), r.answers[key]):
		return fmt.Errorf("%s %s: replayed %s, but its first answer was %s", s, key, buf, r.answers[key])
	case !replayed:
		r.wantRuns.Add(1)
	}
	return nil
}

// checkRuns fails tb unless the handler ran exactly as often as the
// answers account for: once for each unprotected request and each new
// key, never for a replay; and, on a backend whose handler stores its
// transfers, unless each run's transfer was committed.
func (r *rig) checkRuns(tb testing.TB) {
	tb.Helper()
	runs := r.handler.runs.Load()
	if want := r.wantRuns.Load(); runs != want {
		tb.Fatalf("the handler ran %d times; the answers account for %d", runs, want)
	}
	if r.written == nil {
		return
	}
	if n, err := r.written(); err != nil || n != runs {
		tb.Fatalf("%d transfers stored (%v) by %d runs of the handler", n, err, runs)
	}
}

// round is one round's figures, indexed by side.
type round struct {
	p50, p99 [2]time.Duration
	rps      [2]float64
}

// round measures both sides of w in turns, first's first and then
// alternating: in each of sz.turns turns, each side's latencies of
// sz.latency requests from one client; then, in as many turns, each
// side's throughput of sz.throughput requests from all the clients. Short
// turns let both sides meet the same load from elsewhere on the machine.
func (r *rig) round(w workload, sz sizes, first side) (round, error) {
	var (
		out     round
		ds      [2][]time.Duration
		elapsed [2]time.Duration
	)
	turn := func(i int) [2]side {
		if s := first ^ side(i%2); s == unprotected {
			return [2]side{unprotected, protected}
		}
		return [2]side{protected, unprotected}
	}
	for i := range sz.turns {
		for _, s := range turn(i) {
			d, err := r.latencies(s, w, sz.latency)
			if err != nil {
				return out, err
			}
			ds[s] = append(ds[s], d...)
		}
	}
	for i := range sz.turns {
		for _, s := range turn(i) {
			d, err := r.throughput(s, w, sz.throughput)
			if err != nil {
				return out, err
			}
			elapsed[s] += d
		}
	}
	for s := range out.rps {
		out.p50[s], out.p99[s] = percentile(ds[s], 50), percentile(ds[s], 99)
		out.rps[s] = float64(sz.turns*sz.throughput) / elapsed[s].Seconds()
	}
	return out, nil
}

// latencies sends n requests of w to s one after the other and returns the
// time of each, from before the request is written to its answer's last
// byte.
func (r *rig) latencies(s side, w workload, n int) ([]time.Duration, error) {
	ds := make([]time.Duration, n)
	var buf bytes.Buffer
	for i := range n {
		k := r.key(w, i)
		start := time.Now()
		if err := r.post(s, k, w.replay, &buf); err != nil {
			return nil, err
		}
		ds[i] = time.Since(start)
	}
	return ds, nil
}

// throughput sends n requests of w to s from all the clients at once and
// returns the wall-clock time until the last was answered.
func (r *rig) throughput(s side, w workload, n int) (time.Duration, error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			var buf bytes.Buffer
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := r.post(s, r.key(w, i), w.replay, &buf); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// row is one line of the published table: a store and workload's medians
// over the rounds, and the medians of the rounds' ratios protected ÷
// unprotected.
type row struct {
	store, workload string
	rounds          int
	p50, p99        [2]time.Duration
	rps             [2]float64
	p50x, p99x      float64
	rpsx            float64
}

func summarize(store string, w workload, rounds []round) row {
	rw := row{store: store, workload: w.name, rounds: len(rounds)}
	for s := range rw.rps {
		rw.p50[s] = median(rounds, func(rd round) time.Duration { return rd.p50[s] })
		rw.p99[s] = median(rounds, func(rd round) time.Duration { return rd.p99[s] })
		rw.rps[s] = median(rounds, func(rd round) float64 { return rd.rps[s] })
	}
	rw.p50x = median(rounds, func(rd round) float64 { return float64(rd.p50[protected]) / float64(rd.p50[unprotected]) })
	rw.p99x = median(rounds, func(rd round) float64 { return float64(rd.p99[protected]) / float64(rd.p99[unprotected]) })
	rw.rpsx = median(rounds, func(rd round) float64 { return rd.rps[protected] / rd.rps[unprotected] })
	return rw
}

// report reports the row's figures as the benchmark's metrics; a round's
// time would mean nothing, so ns/op is left out.
func (rw row) report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(us(rw.p50[unprotected]), "bare-p50-µs")
	b.ReportMetric(us(rw.p50[protected]), "p50-µs")
	b.ReportMetric(rw.p50x, "p50-x")
	b.ReportMetric(us(rw.p99[unprotected]), "bare-p99-µs")
	b.ReportMetric(us(rw.p99[protected]), "p99-µs")
	b.ReportMetric(rw.p99x, "p99-x")
	b.ReportMetric(rw.rps[unprotected], "bare-req/s")
	b.ReportMetric(rw.rps[protected], "req/s")
	b.ReportMetric(rw.rpsx, "req/s-x")
}

// tableHead is the head of the table docs/benchmarks.md publishes.
const tableHead = "| store | workload | p50, 1 client: unprotected → protected | ratio | p99, 1 client | ratio | requests/s, 16 clients | ratio |\n" +
	"|---|---|---|---|---|---|---|---|\n"

// line writes the row as a line of the published table.
func (rw row) line() string {
	us := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " µs"
	}
	return fmt.Sprintf("| %s | %s | %s → %s | %.2f× | %s → %s | %.2f× | %.0f → %.0f | %.2f× |",
		rw.store, strings.ReplaceAll(rw.workload, "-", " "),
		us(rw.p50[unprotected]), us(rw.p50[protected]), rw.p50x,
		us(rw.p99[unprotected]), us(rw.p99[protected]), rw.p99x,
		rw.rps[unprotected], rw.rps[protected], rw.rpsx)
}

// table writes the rows as the table docs/benchmarks.md publishes.
func table(rows []row) string {
	var sb strings.Builder
	sb.WriteString("\n" + tableHead)
	for _, rw := range rows {
		sb.WriteString(rw.line() + "\n")
	}
	fmt.Fprintf(&sb, "\n%d rounds; each figure the median over the rounds, each ratio (protected ÷ unprotected) the median of the rounds' ratios.", rows[0].rounds)
	return sb.String()
}

// percentile returns the p-th percentile of ds by nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max((len(s)*p+99)/100-1, 0)]
}

// median returns the median of f over the rounds.
func median[T cmp.Ordered](rounds []round, f func(round) T) T {
	xs := make([]T, len(rounds))
	for i, rd := range rounds {
		xs[i] = f(rd)
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
