package lincheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/internal/tcpproxy"
)

// Environment variables that turn the bounded run into a long one.
const (
	envDuration = "IDEMGEN_LIN_DURATION" // how long each store's run sends requests (default 6s)
	envSeed     = "IDEMGEN_LIN_SEED"     // the workload's seed (default: drawn, and logged)
	envStrict   = "IDEMGEN_LIN_STRICT"   // set: no known deviation is tolerated (model.otherBodyMayBeBusy)
)

const (
	clients = 8
	// hotKeys is how many recent keys the clients' retries and reuses
	// draw from: few enough that requests on one key often overlap.
	hotKeys = 12
	// faultGrace is how long after a fault ends a request still counts as
	// faulted: a connection the fault broke is found broken at its next
	// use, which under this load is within milliseconds. Faults are 1-3 s
	// apart, so most requests run with none in force and are held to the
	// strict contract.
	faultGrace = time.Second
)

// op is one request as its client saw it. Times are nanoseconds since the
// run began; a request that got no answer has Return at the moment its
// client gave up.
type op struct {
	ID, Client int
	// Req names the request to the service, which records it with the
	// effect of the execution it runs for it.
	Req       string
	Key, Body string
	Call      int64
	Return    int64
	Status    int
	Problem   string
	Replayed  bool
	Answer    []byte
	Err       string
	HungUp    bool
	// Faulted: an injected fault was in force (or just ended) while it
	// ran, so the model lets it leave a claim nobody waits on, which may
	// execute unseen.
	Faulted bool
	// Overlapped: another request on the same key ran at the same time.
	Overlapped bool
	result     result
}

func (o *op) describe(end bool) string {
	part := "begin"
	if end {
		part = "end"
	}
	var a string
	switch {
	case o.Err != "":
		a = "no answer: " + o.Err
	default:
		a = fmt.Sprintf("%d %s %s", o.Status, o.result, o.Answer)
	}
	f := ""
	if o.Faulted {
		f = " [faulted]"
	}
	return fmt.Sprintf("op %d %s %s %s → %s%s", o.ID, part, o.Key, abridged(o.Body), abridged(a), f)
}

// abridged is s, or for a long s (a large body) its start and its length.
func abridged(s string) string {
	const keep = 120
	if len(s) <= keep {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:keep], len(s))
}

// window is one injected fault, from its start to its end.
type window struct {
	Kind       string
	Start, End int64
}

// fault is one kind of fault: inject breaks something and returns once it
// is healed again.
type fault struct {
	name   string
	inject func(rng *rand.Rand)
}

// run is one store's bounded run: the service's child process, its faults
// and how its effects are read back.
type run struct {
	name    string
	model   model
	env     []string
	faults  []fault
	hangUps bool
	// kill adds kill -9 and restart of the service to the faults.
	kill bool
	// smallBodies: the workload sends no large bodies (the effects mode,
	// whose receipt carries the body into an outbox that limits its
	// payloads).
	smallBodies bool
	// arm, when set, is given while the clients run a kill -9 and restart
	// of the service that records its fault as kind, for the run's own
	// parties to call at the moments they choose. A call while another
	// restart is under way does nothing.
	arm func(kill func(kind string))
	// effects reads every recorded execution once the service is
	// stopped.
	effects func() (effects, error)
	// count runs a query that counts, on the store's database from the
	// test process (SQLite and PostgreSQL).
	count func(query string) (int, error)
	// phases reads the recorded phases named charge once the service is
	// stopped (PostgreSQL).
	phases func() ([]phaseRecord, error)
	// settle, when set, runs once the clients have stopped and before
	// the service is stopped, and returns the faults it injected.
	settle func(svc *service, since func() int64) ([]window, error)
}

// effect is one execution the handler recorded: its run id and the
// request it ran for.
type effect struct{ Run, Req string }

// effects are the recorded executions by key.
type effects map[string][]effect

// report is what one run recorded.
type report struct {
	start   time.Time
	ops     []*op
	windows []window
	effects effects
}

// duration is how long each store's run sends requests.
func duration(t *testing.T) time.Duration {
	if v := os.Getenv(envDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", envDuration, err)
		}
		return d
	}
	return 6 * time.Second
}

func seed(t *testing.T) uint64 {
	if v := os.Getenv(envSeed); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", envSeed, err)
		}
		return s
	}
	return rand.Uint64()
}

// service is the child process that serves the engine; it can be killed
// and started again on the same address.
type service struct {
	t    *testing.T
	addr string
	env  []string
	log  string
	// mu makes each restart whole: the fault injector and a run's own
	// parties (run.arm) restart the service.
	mu  sync.Mutex
	cmd *exec.Cmd
}

func newService(t *testing.T, env []string) *service {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := &service{t: t, addr: addr, env: append(env, envAddr+"="+addr), log: filepath.Join(t.TempDir(), "service.log")}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

// start starts the child and returns once it listens.
func (s *service) start() error {
	logf, err := os.OpenFile(s.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServiceProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
			fmt.Fprintln(logf, sc.Text())
		}
		ready <- fmt.Errorf("service exited before it was ready; see %s", s.log)
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return err
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("service not ready after 30s; see %s", s.log)
	}
	s.cmd = cmd
	return nil
}

// kill ends the child with SIGKILL and waits for it to be gone.
func (s *service) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// restart kills the service with SIGKILL and starts it again.
func (s *service) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	return s.start()
}

// killFault is kill -9 of the service and its restart.
func killFault(s *service) fault {
	return fault{"kill -9", func(*rand.Rand) {
		if err := s.restart(); err != nil {
			s.t.Errorf("restart after kill -9: %v", err)
		}
	}}
}

// proxyFaults are the faults one proxy injects.
func proxyFaults(ps ...*tcpproxy.Proxy) []fault {
	pick := func(rng *rand.Rand) *tcpproxy.Proxy { return ps[rng.IntN(len(ps))] }
	between := func(rng *rand.Rand, lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	return []fault{
		{"reset", func(rng *rand.Rand) { pick(rng).ResetAll() }},
		{"refuse", func(rng *rand.Rand) {
			p := pick(rng)
			p.SetRefuse(true)
			p.ResetAll()
			time.Sleep(between(rng, 100*time.Millisecond, 600*time.Millisecond))
			p.SetRefuse(false)
		}},
		{"stall", func(rng *rand.Rand) {
			p := pick(rng)
			p.SetStall(true)
			// Past the engine's one-second StoreTimeout at times.
			time.Sleep(between(rng, 100*time.Millisecond, 1500*time.Millisecond))
			p.SetStall(false)
		}},
		{"delay", func(rng *rand.Rand) {
			p := pick(rng)
			p.SetDelay(between(rng, 5*time.Millisecond, 150*time.Millisecond))
			time.Sleep(between(rng, 300*time.Millisecond, 1500*time.Millisecond))
			p.SetDelay(0)
		}},
	}
}

// workload hands out requests: a fresh key, a retry of a recent or an old
// key with the key's own body, or such a key reused with another body.
type workload struct {
	mu    sync.Mutex
	next  int
	keys  []string
	later []retry
	ops   []*op
	// large: one key in largeBodyKeys carries a large body.
	large bool
}

// retry is a request its client sends again once due, as a client does
// after a 409, a 503 or no answer: by then a claim a fault left behind
// may be past its lease.
type retry struct {
	key, body string
	due       time.Time
}

func (w *workload) pick(rng *rand.Rand) (key, body string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for i, r := range w.later {
		if now.After(r.due) {
			w.later = append(w.later[:i], w.later[i+1:]...)
			return r.key, r.body
		}
	}
	switch r := rng.IntN(20); {
	case len(w.keys) == 0 || r < 6:
		w.next++
		w.keys = append(w.keys, "k"+strconv.Itoa(w.next))
		if len(w.keys) > hotKeys {
			w.keys = w.keys[1:]
		}
		key = w.keys[len(w.keys)-1]
	case r == 6:
		// An older key, of the last thousand: one whose claim a fault
		// left behind may by now be past its lease, and indeterminate.
		span := min(w.next, 1000)
		key = "k" + strconv.Itoa(w.next-span+1+rng.IntN(span))
	default:
		key = w.keys[rng.IntN(len(w.keys))]
	}
	// Most requests carry the key's own body; a few reuse it for another.
	n, _ := strconv.Atoi(key[1:])
	amount := 100 + n%7
	if rng.IntN(8) == 0 {
		amount += 1000
	}
	if w.large && n%largeBodyKeys == largeBodyKeys/2 {
		// A body, and so an answer, larger than a store might cut a
		// response to.
		return key, fmt.Sprintf(`{"amount":%d,"pad":"%s"}`, amount, strings.Repeat("p", largeBodyPad))
	}
	return key, fmt.Sprintf(`{"amount":%d}`, amount)
}

// One key in largeBodyKeys carries a body padded with largeBodyPad bytes:
// more than the 64 KiB a column or a value of that size would keep.
const (
	largeBodyKeys = 16
	largeBodyPad  = 96 << 10
)

// retryLater schedules o again 0.5-4 s from now, past the lease at times.
func (w *workload) retryLater(o *op, rng *rand.Rand) {
	w.mu.Lock()
	defer w.mu.Unlock()
	due := time.Now().Add(time.Duration(500+rng.IntN(3500)) * time.Millisecond)
	w.later = append(w.later, retry{key: o.Key, body: o.Body, due: due})
}

func (w *workload) record(o *op) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o.ID = len(w.ops)
	w.ops = append(w.ops, o)
}

// history runs r: clients send requests to its service for d while faults
// are injected, then the service is stopped and its effects read back.
func history(t *testing.T, r run, d time.Duration, sd uint64) report {
	svc := newService(t, r.env)
	faults := r.faults
	if r.kill {
		faults = append(faults[:len(faults):len(faults)], killFault(svc))
	}
	url := "http://" + svc.addr + "/transfers"
	start := time.Now()
	since := func() int64 { return time.Since(start).Nanoseconds() }
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()

	rep := report{start: start}
	var wmu sync.Mutex
	var wg sync.WaitGroup
	if len(faults) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(sd, 1<<32))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
				}
				f := faults[rng.IntN(len(faults))]
				w := window{Kind: f.name, Start: since()}
				f.inject(rng)
				w.End = since()
				wmu.Lock()
				rep.windows = append(rep.windows, w)
				wmu.Unlock()
			}
		}()
	}
	if r.arm != nil {
		r.arm(func(kind string) {
			if ctx.Err() != nil || !svc.mu.TryLock() {
				return
			}
			defer svc.mu.Unlock()
			w := window{Kind: kind, Start: since()}
			svc.kill()
			if err := svc.start(); err != nil {
				t.Errorf("restart after %s: %v", kind, err)
			}
			w.End = since()
			wmu.Lock()
			rep.windows = append(rep.windows, w)
			wmu.Unlock()
		})
	}
	wl := workload{large: !r.smallBodies}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(sd, uint64(c)))
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for n := 0; ctx.Err() == nil; n++ {
				key, body := wl.pick(rng)
				o := &op{Client: c, Req: fmt.Sprintf("c%d-%d", c, n), Key: key, Body: body}
				o.HungUp = r.hangUps && rng.IntN(30) == 0
				send(hc, url, o, since, rng)
				wl.record(o)
				if o.Err != "" || o.Status == http.StatusConflict || o.Status >= 500 {
					wl.retryLater(o, rng)
				}
				if o.Err != "" && !o.HungUp {
					// The service is down: wait for its restart rather
					// than fill the history with refused connections.
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	if r.settle != nil {
		ws, err := r.settle(svc, since)
		wmu.Lock()
		rep.windows = append(rep.windows, ws...)
		wmu.Unlock()
		if err != nil {
			t.Errorf("settle %s: %v", r.name, err)
		}
	}
	svc.mu.Lock()
	svc.kill()
	svc.mu.Unlock()
	rep.ops = wl.ops
	effects, err := r.effects()
	if err != nil {
		t.Fatalf("read the effects back: %v", err)
	}
	rep.effects = effects
	prepare(rep.ops, rep.windows)
	return rep
}

// prepare classifies each answer and marks the requests that ran while an
// injected fault was in force and those that overlapped another request
// on their key. Only an injected fault makes a request faulted: a 503
// outside one (a store slower than the engine's store timeout on a loaded
// machine) says the request was not processed, and the model holds it to
// that.
func prepare(ops []*op, windows []window) {
	for _, o := range ops {
		o.result = classify(o)
		for _, w := range windows {
			if w.Start <= o.Return && o.Call <= w.End+faultGrace.Nanoseconds() {
				o.Faulted = true
			}
		}
	}
	markOverlaps(ops)
}

// markOverlaps marks each request whose interval, as porcupine sees it (a
// request without an answer runs to the end), meets another's on its key.
func markOverlaps(ops []*op) {
	end := lastReturn(ops) + 1
	span := func(o *op) int64 {
		if o.result == resNoAnswer {
			return end
		}
		return o.Return
	}
	byKey := map[string][]*op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	for _, same := range byKey {
		sort.Slice(same, func(i, j int) bool { return same[i].Call < same[j].Call })
		// Sorted by call, a request meets a later one exactly when the
		// later one is called before the earlier returns.
		for i, a := range same {
			for _, b := range same[i+1:] {
				if b.Call > span(a) {
					break
				}
				a.Overlapped, b.Overlapped = true, true
			}
		}
	}
}

// lastReturn is when the last request of ops returned.
func lastReturn(ops []*op) int64 {
	var last int64
	for _, o := range ops {
		last = max(last, o.Return)
	}
	return last
}

// send makes o's request and records what came back.
func send(hc *http.Client, url string, o *op, since func() int64, rng *rand.Rand) {
	ctx := context.Background()
	if o.HungUp {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(25))*time.Millisecond)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(o.Body))
	if err != nil {
		panic(err)
	}
	// net/http's Transport sends a request with an Idempotency-Key header
	// again, on its own, when a reused connection breaks before the first
	// byte of the answer: the service killed after it committed. The
	// client would then record the replay of its own execution. Without
	// GetBody it cannot: each request is sent once, as its record says.
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", o.Key)
	req.Header.Set(requestHeader, o.Req)
	o.Call = since()
	resp, err := hc.Do(req)
	if err == nil {
		o.Answer, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	o.Return = since()
	if err != nil {
		o.Err = err.Error()
		return
	}
	o.Status = resp.StatusCode
	o.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(o.Answer, &p)
		o.Problem = p.Type[strings.LastIndexByte(p.Type, '/')+1:]
	}
}

// runOf is the run id an answer names.
func runOf(answer []byte) string {
	const prefix = `{"run":"`
	s := string(answer)
	if !strings.HasPrefix(s, prefix) || len(s) < len(prefix)+16 {
		return ""
	}
	return s[len(prefix) : len(prefix)+16]
}

// operations is the porcupine history of ops: each request as its begin
// and its end (step). A request that got no answer returns after every
// other, since it may still have been served after its client gave up.
func operations(ops []*op) []porcupine.Operation {
	last := lastReturn(ops)
	var history []porcupine.Operation
	for _, o := range ops {
		ret := o.Return
		if o.result == resNoAnswer {
			ret = last + 1
		}
		for _, end := range []bool{false, true} {
			history = append(history, porcupine.Operation{ClientId: o.Client, Input: step{op: o, end: end}, Call: o.Call, Return: ret})
		}
	}
	return history
}

// illegalKeys checks each key's history apart and writes out, as text,
// those porcupine refuses: the visualization shows the same, in a browser.
func illegalKeys(pm porcupine.Model, history []porcupine.Operation) []string {
	var out []string
	deadline := time.Now().Add(keysCheckBudget)
	for _, part := range partitionByKey(history) {
		if len(out) == maxKeysNamed || time.Now().After(deadline) {
			out = append(out, "(more keys not looked at)")
			break
		}
		// Bounded: proving a key's history illegal can take porcupine
		// a search exponential in its overlapping requests.
		res := porcupine.CheckOperationsTimeout(pm, part, keyCheckTimeout)
		if res == porcupine.Ok {
			continue
		}
		var b strings.Builder
		verdict := "is not linearizable"
		if res == porcupine.Unknown {
			verdict = "was not decided within " + keyCheckTimeout.String()
		}
		fmt.Fprintf(&b, "key %s %s:", part[0].Input.(step).op.Key, verdict)
		for _, o := range part {
			if st := o.Input.(step); !st.end {
				fmt.Fprintf(&b, "\n\t[%.3fs, %.3fs] client %d: %s", float64(o.Call)/1e9, float64(o.Return)/1e9, o.ClientId, st.op.describe(false))
			}
		}
		out = append(out, b.String())
	}
	return out
}

// check judges rep against the contract: porcupine on the history, then
// the effects read back from the store's database. It returns the
// violations and, when the history is not linearizable, the path of
// porcupine's visualization.
func check(rep report, m model) (violations []string, viz string) {
	violations, viz, _ = checkWithin(rep, m, 5*time.Minute)
	return violations, viz
}

// When the whole history was refused, illegalKeys says which keys: at most
// maxKeysNamed of them, looking at each for at most keyCheckTimeout and at
// all of them for at most keysCheckBudget.
const (
	maxKeysNamed    = 5
	keyCheckTimeout = 10 * time.Second
	keysCheckBudget = 20 * time.Second
)

// checkWithin is check with porcupine's search bounded by d; a history it
// cannot decide in d is a violation that says so. It returns porcupine's
// verdict too: Unknown when the search ran out of time.
func checkWithin(rep report, m model, d time.Duration) (violations []string, viz string, res porcupine.CheckResult) {
	history := operations(rep.ops)
	pm := m.porcupine()
	res, info := porcupine.CheckOperationsVerbose(pm, history, d)
	if res != porcupine.Ok {
		violations = append(violations, fmt.Sprintf("porcupine: the history is %s", res))
		violations = append(violations, illegalKeys(pm, history)...)
		if dir, err := os.MkdirTemp("", "lincheck-"); err == nil {
			viz = filepath.Join(dir, "history.html")
			if err := porcupine.VisualizePath(pm, info, viz); err != nil {
				violations = append(violations, fmt.Sprintf("write the visualization: %v", err))
				viz = ""
			}
		}
	}
	return append(violations, checkEffects(rep)...), viz, res
}

// checkEffects judges the effects read back: no key has more than one,
// every executed answer and every replay names the key's, and no request
// whose answer says it was not processed owns one.
func checkEffects(rep report) []string {
	var violations []string
	byReq := map[string]*op{}
	for _, o := range rep.ops {
		byReq[o.Req] = o
	}
	for key, es := range rep.effects {
		if len(es) > 1 {
			violations = append(violations, fmt.Sprintf("key %s: the handler's effect is recorded %d times (%v)", key, len(es), es))
		}
		for _, e := range es {
			if o := byReq[e.Req]; o != nil && notProcessed(o) {
				violations = append(violations, fmt.Sprintf("%s: its answer says it was not processed, and it owns the committed effect of run %s", o.describe(false), e.Run))
			}
		}
	}
	for _, o := range rep.ops {
		if o.result != resExecuted && o.result != resReplayed {
			continue
		}
		es := rep.effects[o.Key]
		if len(es) == 0 || es[0].Run != runOf(o.Answer) {
			violations = append(violations, fmt.Sprintf("%s: its run is not the effect recorded for the key (%v)", o.describe(false), es))
		}
	}
	return violations
}

// notProcessed reports whether o's answer says that its handler did not
// run for it, or ran and left nothing: a replay, 422, 409, and a 503 or
// the handler's own 500 outside an injected fault. Under a fault the
// engine may answer 503 to a commit whose reply was lost, and so is
// allowed an execution it did not see.
func notProcessed(o *op) bool {
	switch o.result {
	case resReplayed, resMismatch, resInProgress, resIndeterminate, resFailedAfterCharge:
		return true
	case resUnavailable, resHandlerFailed:
		return !o.Faulted
	}
	return false
}

// summary counts what a run did, for the log and docs/verification.md.
func summary(rep report) string {
	keys := map[string]bool{}
	results := map[result]int{}
	faulted := 0
	for _, o := range rep.ops {
		keys[o.Key] = true
		results[o.result]++
		if o.Faulted {
			faulted++
		}
	}
	faults := map[string]int{}
	for _, w := range rep.windows {
		faults[w.Kind]++
	}
	var rs []string
	for r := resExecuted; r <= resOther; r++ {
		if results[r] > 0 {
			rs = append(rs, fmt.Sprintf("%s %d", r, results[r]))
		}
	}
	var fs []string
	for k, n := range faults {
		fs = append(fs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(fs)
	return fmt.Sprintf("%d operations (%d while a fault was in force), %d keys (histories), %d faults [%s], answers [%s]",
		len(rep.ops), faulted, len(keys), len(rep.windows), strings.Join(fs, ", "), strings.Join(rs, ", "))
}

// checkRun runs r and fails t on every violation.
func checkRun(t *testing.T, r run) {
	sd := seed(t)
	d := duration(t)
	rep := history(t, r, d, sd)
	violations, viz := check(rep, r.model)
	t.Logf("lincheck %s seed %d, %v: %s, %d violations", r.name, sd, d, summary(rep), len(violations))
	for _, v := range violations {
		t.Error(v)
	}
	if viz != "" {
		t.Errorf("porcupine's visualization of the history: %s", viz)
	}
}

// fileEffects reads the effects file the non-transactional handler
// appends to, one "key run request" line per execution.
func fileEffects(path string) func() (effects, error) {
	return func() (effects, error) {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		out := effects{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) == 3 {
				out[f[0]] = append(out[f[0]], effect{Run: f[1], Req: f[2]})
			}
		}
		return out, nil
	}
}
