// Package model is the model-based test of the store contract, for the
// author of a store: the store's tests hand Run the same storetest.Target
// they hand the conformance suite. The conformance suite (storetest.Run,
// storetest.RunTx) checks one rule per subtest; Run drives a store through
// long random sequences of claims, completions, releases, abandonments, crashes,
// clock steps and sweeps, and compares every answer with a small executable
// model of the contract (docs/semantics.md §3, §4 and §7.4). It finds
// what no single rule's test looks for: two rules that are each kept but
// together let two requests hold one key.
//
// The model, in the order a claim meets it:
//
//   - An absent row, or one whose expires_at has passed, is claimed anew:
//     won, not taken over, lease and TTL from now.
//   - A live row of another request (fingerprint, or operation under scope
//     tenant) stands, whatever its state.
//   - The same request's in-flight row whose lease ran out is taken over
//     (new token, new lease, and expires_at moved to the new lease's end if
//     the lease would outlive it) or marked indeterminate, as the claim asks.
//   - Anything else stands.
//
// Complete, Release and Abandon succeed only for the current token of an
// in-flight row, and answer idemstore.ErrFenced otherwise. On a row whose
// expires_at has passed the contract leaves it open (such a row counts as
// absent for claims, and a sweeper may already have deleted it), so the model
// accepts either answer there and follows the one the store gave.
//
// The invariant checked at every won claim: no other holder of the key is
// still running with its lease unexpired. A holder is running from its won
// claim until it completes, releases, abandons or is fenced; a crashed
// holder never calls again, and its lease runs out on its own.
//
// Transactional claims (storetest.Target.TxClaims) differ by store, and
// the model follows the store's documented design:
//
//   - storetest.TxClaimCommitted (sqlitestore): the claim commits on its
//     own before the handler's transaction begins. Other requests see the
//     row; Release deletes it; a crash (the transaction rolled back without
//     Commit) leaves it in flight until its lease runs out, as a plain
//     claim's crash does.
//   - storetest.TxClaimInTx (pgstore): the claim is written inside the
//     handler's transaction. Other claims meet it as busy (in flight,
//     reported as their own request, no lease known); Release or a crash
//     rolls it back, and the key is at once what it was before the claim,
//     so a retry runs without waiting for the lease. A lost transactional
//     claim that marks an abandoned key indeterminate keeps the mark, as a
//     plain claim does.
//
// Clocks: the stores run on a storetest.Clock the test sets (and
// storetest.Instance.SetClock keeps a database's clock in step), in whole
// milliseconds, so lease remainders are compared exactly and every run
// is determined by its seed.
package model

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest"
)

// modelTarget is the store under one run, as the model drives it.
type modelTarget struct {
	Store idemstore.Store
	// SetClock makes the store's clock read now from this call on.
	SetClock func(ctx context.Context, now time.Time) error
	// Tx, when not nil, adds transactional claims to the sequences.
	Tx *modelTx
}

// modelTx is a store's transactional claims, as the model drives them.
type modelTx struct {
	Store  idemstore.Transactor
	Claims storetest.TxClaims
	Crash  func(ctx context.Context, tx idemstore.Tx) error
}

// open opens a store of target on a clock the model sets.
func open(t *testing.T, target storetest.Target) modelTarget {
	t.Helper()
	clock := new(storetest.Clock)
	in := target.Open(t, clock)
	mt := modelTarget{Store: in.Store, SetClock: func(ctx context.Context, now time.Time) error {
		clock.Set(now)
		if in.SetClock != nil {
			return in.SetClock(ctx, now)
		}
		return nil
	}}
	if target.TxClaims != 0 {
		tr, ok := in.Store.(idemstore.Transactor)
		if !ok || in.Crash == nil {
			t.Fatalf("model: with TxClaims, the target needs a Store that is an idemstore.Transactor (%T) and a Crash", in.Store)
		}
		mt.Tx = &modelTx{Store: tr, Claims: target.TxClaims, Crash: in.Crash}
	}
	if mt.Store == nil {
		t.Fatal("model: the target opened no Store")
	}
	return mt
}

// Options sizes a model-based run. The environment overrides it:
// IDEMGEN_MODEL_SEEDS (comma-separated seeds to run), IDEMGEN_MODEL_RUNS
// (run seeds 1..n) and IDEMGEN_MODEL_STEPS (steps per seed).
type Options struct {
	// Runs is how many seeds run by default (seeds 1..Runs).
	Runs int
	// Steps is how many steps each seed runs.
	Steps int
	// ShrinkFor bounds the time spent shrinking a failing sequence.
	ShrinkFor time.Duration
}

// Run runs the model-based test: for each seed, target opens a fresh store
// on a clock the model sets, and a random sequence determined by the seed is driven against it
// and the model. A failure reports the seed and the sequence, shrunk to the
// fewest steps that still fail the same way, each step with the store's
// answer.
func Run(t *testing.T, opts Options, target storetest.Target) {
	t.Helper()
	seeds, steps, err := modelSeeds(opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			mt := open(t, target)
			d := &modelDriver{target: mt, clock: modelEpoch(), seen: make(map[string]int)}
			ops := generateOps(seed, steps, mt.Tx != nil)
			f := d.replay(t, ops)
			if f == nil {
				labels := make([]string, 0, len(d.seen))
				for l := range d.seen {
					labels = append(labels, l)
				}
				sort.Strings(labels)
				for _, l := range labels {
					t.Logf("%6d × %s", d.seen[l], l)
				}
				return
			}
			failed := f.step + 1
			ops, f, done := d.shrink(t, ops[:failed], f, opts.ShrinkFor)
			var b strings.Builder
			fmt.Fprintf(&b, "model: seed %d failed at step %d of %d: %s\n", seed, failed, steps, f.msg)
			fmt.Fprintf(&b, "rerun with IDEMGEN_MODEL_SEEDS=%d IDEMGEN_MODEL_STEPS=%d\n", seed, steps)
			how := "shrunk"
			if !done {
				how = "partly shrunk (out of time)"
			}
			fmt.Fprintf(&b, "%s to %d steps (step, time since the start, what it did → the store's answer):\n", how, len(ops))
			for _, line := range f.log {
				b.WriteString("  " + line + "\n")
			}
			t.Error(b.String())
		})
	}
}

// modelSeeds reads the run's seeds and length from opts and the environment.
func modelSeeds(opts Options) ([]int64, int, error) {
	runs, steps := max(opts.Runs, 1), max(opts.Steps, 1)
	if v := os.Getenv("IDEMGEN_MODEL_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, 0, fmt.Errorf("IDEMGEN_MODEL_STEPS=%q: want a positive integer", v)
		}
		steps = n
	}
	if v := os.Getenv("IDEMGEN_MODEL_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, 0, fmt.Errorf("IDEMGEN_MODEL_RUNS=%q: want a positive integer", v)
		}
		runs = n
	}
	var seeds []int64
	if v := os.Getenv("IDEMGEN_MODEL_SEEDS"); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("IDEMGEN_MODEL_SEEDS=%q: want comma-separated integers", v)
			}
			seeds = append(seeds, n)
		}
		return seeds, steps, nil
	}
	for i := range runs {
		seeds = append(seeds, int64(i+1))
	}
	return seeds, steps, nil
}

// longestTTL is the longest TTL a sequence's claims carry: hours, against
// leases and other TTLs of seconds.
const longestTTL = 3 * time.Hour

// modelEpoch is where every store's clock starts: a fixed instant, so that
// runs repeat exactly, on a whole second.
func modelEpoch() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }

// modelRequest is one request a client can send: an identity, an operation
// and a body that names its fingerprint.
type modelRequest struct {
	id        idemstore.Identity
	operation string
	body      string
	// weight is how often a step picks the request.
	weight int
}

// modelRequests is the small world the sequences play in: few keys, so
// that requests meet each other often, with both scopes, a second tenant,
// a second body and a second operation on a tenant-scoped key. The first
// key is the busiest.
func modelRequests() []modelRequest {
	a := idemstore.Identity{Tenant: "t1", Scope: "createTransfer", Key: "k1"}
	b := idemstore.Identity{Tenant: "t1", Scope: "createTransfer", Key: "k2"}
	tenant := idemstore.Identity{Tenant: "t1", Scope: "", Key: "k1"}
	other := idemstore.Identity{Tenant: "t2", Scope: "createTransfer", Key: "k1"}
	// Two keys whose tenant and key, joined with a colon, spell the same
	// text.
	colonKey := idemstore.Identity{Tenant: "t3", Scope: "createTransfer", Key: "a:b"}
	colonTenant := idemstore.Identity{Tenant: "t3:a", Scope: "createTransfer", Key: "b"}
	return []modelRequest{
		{a, "createTransfer", "b1", 5},
		{a, "createTransfer", "b2", 2},
		{b, "createTransfer", "b1", 1},
		{tenant, "createTransfer", "b1", 2},
		{tenant, "createRefund", "b1", 1},
		{tenant, "createTransfer", "b2", 1},
		{other, "createTransfer", "b1", 1},
		{colonKey, "createTransfer", "b1", 1},
		{colonTenant, "createTransfer", "b1", 1},
	}
}

func fingerprint(body string) []byte {
	sum := sha256.Sum256([]byte(body))
	return sum[:]
}

func (r modelRequest) String() string {
	scope := r.id.Scope
	if scope == "" {
		scope = "(tenant)"
	}
	return fmt.Sprintf("%s/%s/%s %s %s", r.id.Tenant, scope, r.id.Key, r.operation, r.body)
}

// opKind is what a step does.
type opKind int

const (
	opClaim opKind = iota
	opTxClaim
	opComplete
	opRelease
	opAbandon
	opCrash
	opClock
	opSweep
)

// txEnd is how a transactional claim's handler ends.
type txEnd int

const (
	txCommit txEnd = iota
	txRelease
	txCrash
)

// modelOp is one step, drawn before the run from the seed alone so that a
// sequence can be shrunk and replayed. Steps that act through a holder
// choose it when they run (pick), among the holders still running or,
// when late, among every holder that has not crashed.
type modelOp struct {
	kind       opKind
	req        int
	lease, ttl time.Duration
	mode       idemstore.LeaseExpiry
	pick       int
	late       bool
	dt         time.Duration
	limit      int
	resp       int
	end        txEnd
	probe      int // -1: none; else picks a request of the same key
}

func generateOps(seed int64, n int, tx bool) []modelOp {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x1de16e9))
	kinds := []struct {
		kind   opKind
		weight int
	}{
		{opClaim, 30}, {opComplete, 12}, {opRelease, 5}, {opAbandon, 6},
		{opCrash, 5}, {opClock, 22}, {opSweep, 4}, {opTxClaim, 10},
	}
	if !tx {
		kinds = kinds[:len(kinds)-1]
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	weighted := func(weights []int) int {
		sum := 0
		for _, w := range weights {
			sum += w
		}
		x := rng.IntN(sum)
		for i, w := range weights {
			if x < w {
				return i
			}
			x -= w
		}
		return len(weights) - 1
	}
	var requestWeights []int
	for _, rq := range modelRequests() {
		requestWeights = append(requestWeights, rq.weight)
	}
	// Leases of a second and a half, so that one kept in whole seconds
	// runs out early, and a TTL of hours among TTLs of seconds, for a
	// store that caps a TTL.
	leases := []time.Duration{time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond, 3 * time.Second}
	ttls := []time.Duration{2 * time.Second, 3 * time.Second, 4 * time.Second, 6 * time.Second, 10 * time.Second, longestTTL}
	ops := make([]modelOp, n)
	for i := range ops {
		x := rng.IntN(total)
		var kind opKind
		for _, k := range kinds {
			if x < k.weight {
				kind = k.kind
				break
			}
			x -= k.weight
		}
		op := modelOp{kind: kind, req: weighted(requestWeights), pick: rng.IntN(1 << 16), late: rng.IntN(5) == 0, resp: rng.IntN(1000), probe: -1}
		// A lease is always shorter than the TTL, as a policy's must be.
		op.lease = leases[rng.IntN(len(leases))]
		for op.ttl <= op.lease {
			op.ttl = ttls[rng.IntN(len(ttls))]
		}
		op.mode = idemstore.Takeover
		if rng.IntN(3) == 0 {
			op.mode = idemstore.FailClosed
		}
		switch kind {
		case opClock:
			// Mostly steps within a lease, some across leases and TTLs, a
			// few past every TTL of seconds, and a few of minutes within
			// the TTL of hours.
			switch r := rng.IntN(40); {
			case r < 16:
				op.dt = time.Duration(1+rng.IntN(200)) * time.Millisecond
			case r < 30:
				op.dt = time.Duration(200+rng.IntN(1800)) * time.Millisecond
			case r < 37:
				op.dt = time.Duration(2000+rng.IntN(3000)) * time.Millisecond
			case r < 39:
				op.dt = 12 * time.Second
			default:
				op.dt = time.Duration(2+rng.IntN(20)) * time.Minute
			}
		case opSweep:
			op.limit = []int{1, 2, 3, 100}[rng.IntN(4)]
		case opTxClaim:
			op.end = txEnd(weighted([]int{5, 2, 3}))
			if rng.IntN(2) == 0 {
				op.probe = rng.IntN(1 << 16)
			}
		}
		ops[i] = op
	}
	return ops
}

// mrow is the model's row of a key.
type mrow struct {
	operation  string
	body       string
	state      idemstore.State
	token      string
	leaseUntil time.Time
	// failClosed is the mode of the claim that holds the row: a takeover
	// needs both it and the claim that meets the row to allow one.
	failClosed bool
	expiresAt  time.Time
	resp       *idemstore.Response
	// maybeGone is set on an expired row that a sweep with a limit may or
	// may not have deleted; the next answer that depends on it decides.
	maybeGone bool
}

// holder is a request that won a claim.
type holder struct {
	n          int
	req        int
	token      string
	leaseUntil time.Time
	running    bool // has not completed, released, abandoned or been fenced
	crashed    bool // forgot its token: never calls again
	tx         bool
}

// modelRun is one replay of a sequence against the store and the model.
type modelRun struct {
	ctx     context.Context
	target  modelTarget
	reqs    []modelRequest
	prefix  string // keeps this replay's keys apart from earlier replays'
	start   time.Time
	now     time.Time
	rows    map[idemstore.Identity]*mrow
	holders []*holder
	tokens  int
	// seen counts what the steps met, so that a run can show it covered
	// each case (go test -v).
	seen map[string]int
}

// modelFailure is a sequence's first disagreement with the model.
type modelFailure struct {
	step  int
	class string // what disagreed; shrinking keeps it
	msg   string
	log   []string
}

// modelDriver replays sequences on one store. Each replay starts on a
// store swept empty, with the clock moved past every key of the replay
// before and its keys under a new tenant prefix.
type modelDriver struct {
	target  modelTarget
	clock   time.Time
	replays int
	seen    map[string]int
}

func (d *modelDriver) replay(t *testing.T, ops []modelOp) *modelFailure {
	t.Helper()
	ctx := context.Background()
	if d.replays > 0 {
		// Past every lease and TTL of the last replay, then sweep: nothing of
		// it can meet this one, not even in a sweep's count.
		d.clock = d.clock.Add(longestTTL + time.Minute).Truncate(time.Second)
	}
	if err := d.target.SetClock(ctx, d.clock); err != nil {
		t.Fatalf("model: set clock: %v", err)
	}
	if sw, ok := d.target.Store.(idemstore.Sweeper); ok && d.replays > 0 {
		for range 1000 {
			n, err := sw.Sweep(ctx, 1000)
			if err != nil {
				t.Fatalf("model: sweep between replays: %v", err)
			}
			if n == 0 {
				break
			}
		}
	}
	r := &modelRun{
		ctx:    ctx,
		target: d.target,
		reqs:   modelRequests(),
		prefix: fmt.Sprintf("r%d-", d.replays),
		start:  d.clock,
		now:    d.clock,
		rows:   make(map[idemstore.Identity]*mrow),
		seen:   d.seen,
	}
	d.replays++
	var log []string
	for i, op := range ops {
		line, f := r.step(op)
		log = append(log, fmt.Sprintf("%4d +%-8s %s", i+1, fmtOffset(r.now.Sub(r.start)), line))
		if f != nil {
			f.step = i
			f.log = log
			d.clock = r.now
			return f
		}
	}
	d.clock = r.now
	return nil
}

func fmtOffset(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
}

// shrink removes steps from a failing sequence while it still fails the
// same way, for at most budget, and returns the shortest sequence found
// with its failure, and whether it finished within budget.
func (d *modelDriver) shrink(t *testing.T, ops []modelOp, f *modelFailure, budget time.Duration) ([]modelOp, *modelFailure, bool) {
	t.Helper()
	deadline := time.Now().Add(budget)
	for size := len(ops) / 2; size >= 1; {
		removed := false
		for i := 0; i+size <= len(ops) && time.Now().Before(deadline); {
			cand := append(append([]modelOp(nil), ops[:i]...), ops[i+size:]...)
			if cf := d.replay(t, cand); cf != nil && cf.class == f.class {
				ops, f, removed = cand[:cf.step+1], cf, true
				continue
			}
			i += size
		}
		if time.Now().After(deadline) {
			break
		}
		if !removed || size > 1 {
			size /= 2
		}
	}
	// Adjacent clock steps read as one: nothing happens between them.
	if merged := mergeClocks(ops); len(merged) < len(ops) {
		if cf := d.replay(t, merged); cf != nil && cf.class == f.class {
			ops, f = merged[:cf.step+1], cf
		}
	}
	return ops, f, time.Now().Before(deadline)
}

// mergeClocks joins runs of clock steps into one step each.
func mergeClocks(ops []modelOp) []modelOp {
	var out []modelOp
	for _, op := range ops {
		if n := len(out); n > 0 && op.kind == opClock && out[n-1].kind == opClock {
			out[n-1].dt += op.dt
			continue
		}
		out = append(out, op)
	}
	return out
}

// id is the identity of request i as the store sees it.
func (r *modelRun) id(i int) idemstore.Identity {
	id := r.reqs[i].id
	id.Tenant = r.prefix + id.Tenant
	return id
}

func (r *modelRun) fail(class, format string, args ...any) *modelFailure {
	return &modelFailure{class: class, msg: fmt.Sprintf(format, args...)}
}

// step runs one op against the store and the model. It returns the line
// that describes it and, on a disagreement, the failure.
func (r *modelRun) step(op modelOp) (string, *modelFailure) {
	switch op.kind {
	case opClaim:
		return r.claimStep(op)
	case opTxClaim:
		if r.target.Tx == nil {
			return r.claimStep(op)
		}
		return r.txClaimStep(op)
	case opComplete, opRelease, opAbandon:
		return r.tokenStep(op)
	case opCrash:
		h := r.pickHolder(op.pick, false)
		if h == nil {
			return "crash: no running holder", nil
		}
		h.crashed = true
		r.seen["crash"]++
		return fmt.Sprintf("h%d crashes: it never calls again (lease until +%s)", h.n, fmtOffset(h.leaseUntil.Sub(r.start))), nil
	case opClock:
		r.now = r.now.Add(op.dt)
		if err := r.target.SetClock(r.ctx, r.now); err != nil {
			return "clock", r.fail("error", "set clock: %v", err)
		}
		return fmt.Sprintf("clock +%v", op.dt), nil
	case opSweep:
		return r.sweepStep(op)
	}
	return "", r.fail("error", "unknown step kind %d", op.kind)
}

// pickHolder chooses among the holders that have not crashed: the running
// ones, or with late every one (a late call from a request that already
// finished or was fenced).
func (r *modelRun) pickHolder(pick int, late bool) *holder {
	var cands []*holder
	for _, h := range r.holders {
		if !h.crashed && (late || h.running) {
			cands = append(cands, h)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[pick%len(cands)]
}

func (r *modelRun) newClaim(op modelOp, req int) idemstore.Claim {
	r.tokens++
	rq := r.reqs[req]
	return idemstore.Claim{
		Identity:      r.id(req),
		Operation:     rq.operation,
		Fingerprint:   fingerprint(rq.body),
		Token:         fmt.Sprintf("%stok%d", r.prefix, r.tokens),
		Lease:         op.lease,
		TTL:           op.ttl,
		OnLeaseExpiry: op.mode,
	}
}

// claimView is what a claim's answer is compared by.
type claimView struct {
	Won, TookOver  bool
	State          idemstore.State
	Operation      string
	Fingerprint    string
	LeaseRemaining time.Duration
	Response       *respView
}

type respView struct {
	Status  int
	Header  http.Header
	Body    string
	Omitted bool
}

func (r *modelRun) viewResult(res idemstore.Result) claimView {
	v := claimView{Won: res.Won, TookOver: res.TookOver}
	if res.Won {
		return v
	}
	e := res.Existing
	v.State, v.Operation, v.LeaseRemaining = e.State, e.Operation, e.LeaseRemaining
	v.Fingerprint = fmt.Sprintf("%x", e.Fingerprint)
	for _, body := range []string{"b1", "b2"} {
		if bytes.Equal(e.Fingerprint, fingerprint(body)) {
			v.Fingerprint = body
		}
	}
	if e.Response != nil {
		v.Response = &respView{e.Response.Status, e.Response.Header, bodyView(e.Response.Body), e.Response.Omitted}
	}
	return v
}

func (v claimView) String() string {
	if v.Won {
		if v.TookOver {
			return "won, took over"
		}
		return "won"
	}
	s := fmt.Sprintf("lost to %s %s %s", v.State, v.Operation, v.Fingerprint)
	if v.LeaseRemaining > 0 {
		s += fmt.Sprintf(" lease %v left", v.LeaseRemaining)
	}
	if v.Response != nil {
		s += fmt.Sprintf(" response %d", v.Response.Status)
	}
	return s
}

// expired reports whether row counts as absent now.
func (r *modelRun) expired(row *mrow) bool {
	return row == nil || !row.expiresAt.After(r.now)
}

// modelClaim decides c as the contract does and changes the model. It
// returns the answer the store must give.
func (r *modelRun) modelClaim(c idemstore.Claim, req int) claimView {
	key := r.reqs[req].id
	rq := r.reqs[req]
	row := r.rows[key]
	if r.expired(row) {
		r.rows[key] = &mrow{
			operation: rq.operation, body: rq.body, state: idemstore.StateInFlight, token: c.Token,
			leaseUntil: r.now.Add(c.Lease), expiresAt: r.now.Add(c.TTL),
			failClosed: c.OnLeaseExpiry == idemstore.FailClosed,
		}
		return claimView{Won: true}
	}
	same := row.operation == rq.operation && row.body == rq.body
	if same && row.state == idemstore.StateInFlight && !row.leaseUntil.After(r.now) {
		if c.OnLeaseExpiry == idemstore.Takeover && !row.failClosed {
			row.token = c.Token
			row.leaseUntil = r.now.Add(c.Lease)
			// docs/semantics.md §7.4: an in-flight row with a running lease is never
			// absent, so the key lives at least as long as the new lease.
			if row.leaseUntil.After(row.expiresAt) {
				row.expiresAt = row.leaseUntil
			}
			return claimView{Won: true, TookOver: true}
		}
		row.state = idemstore.StateIndeterminate
	}
	return r.rowView(row)
}

// rowView is the answer a losing claim gets from row.
func (r *modelRun) rowView(row *mrow) claimView {
	v := claimView{State: row.state, Operation: row.operation, Fingerprint: row.body}
	if row.state == idemstore.StateInFlight && row.leaseUntil.After(r.now) {
		v.LeaseRemaining = row.leaseUntil.Sub(r.now)
	}
	if row.state == idemstore.StateCompleted && row.resp != nil {
		v.Response = &respView{row.resp.Status, row.resp.Header, bodyView(row.resp.Body), row.resp.Omitted}
	}
	return v
}

// checkWin enforces the invariant when the store let a claim of request req win: no other holder
// of the key is running with its lease unexpired.
func (r *modelRun) checkWin(what string, req int) *modelFailure {
	key := r.reqs[req].id
	for _, h := range r.holders {
		if r.reqs[h.req].id != key || !h.running || !h.leaseUntil.After(r.now) {
			continue
		}
		state := "running"
		if h.crashed {
			state = "crashed"
		}
		return r.fail("two-live-holders",
			"two live holders of %s: the store let this %s win while h%d (%s, %s) holds a lease until +%s",
			r.reqs[req], what, h.n, r.reqs[h.req], state, fmtOffset(h.leaseUntil.Sub(r.start)))
	}
	return nil
}

func (r *modelRun) addHolder(c idemstore.Claim, req int, tx bool) *holder {
	h := &holder{n: len(r.holders) + 1, req: req, token: c.Token, leaseUntil: r.now.Add(c.Lease), running: true, tx: tx}
	r.holders = append(r.holders, h)
	return h
}

func describeClaim(kind string, c idemstore.Claim, rq modelRequest) string {
	return fmt.Sprintf("%s %s lease %v ttl %v %s", kind, rq, c.Lease, c.TTL, c.OnLeaseExpiry)
}

// compareClaim checks the store's answer res to a claim against want.
func (r *modelRun) compareClaim(what string, req int, want claimView, res idemstore.Result) *modelFailure {
	got := r.viewResult(res)
	if got.Won {
		if f := r.checkWin(what, req); f != nil {
			return f
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		return r.fail(what, "%s of %s: the store answered %q, the model %q (-model +store):\n%s", what, r.reqs[req], got, want, diff)
	}
	outcome := "won"
	switch {
	case got.TookOver:
		outcome = "took over"
	case got.Won:
	case got.Operation != r.reqs[req].operation || got.Fingerprint != r.reqs[req].body:
		outcome = "mismatch, " + string(got.State)
	default:
		outcome = "lost to " + string(got.State)
	}
	r.seen[what+": "+outcome]++
	return nil
}

func (r *modelRun) claimStep(op modelOp) (string, *modelFailure) {
	c := r.newClaim(op, op.req)
	line := describeClaim("claim", c, r.reqs[op.req])
	want := r.modelClaim(c, op.req)
	res, err := r.target.Store.Claim(r.ctx, c)
	if err != nil {
		return line + ": error", r.fail("error", "claim: %v", err)
	}
	line += " → " + r.viewResult(res).String()
	if f := r.compareClaim("claim", op.req, want, res); f != nil {
		return line, f
	}
	if res.Won {
		line += fmt.Sprintf(" (h%d)", r.addHolder(c, op.req, false).n)
	}
	return line, nil
}

// bodyView is a body as an answer is compared by: itself, or for a large
// one its length and digest, so that a failure prints a line rather than
// a megabyte.
func bodyView(b []byte) string {
	if len(b) <= 1<<10 {
		return string(b)
	}
	return fmt.Sprintf("(%d bytes, crc32c %08x)", len(b), crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// largeBodySize is the size of a large answer's body: the 1 MiB a server
// reads of a body by default.
const largeBodySize = 1 << 20

// modelResponse is the response of step variant n: a few statuses, a
// header with two values, a body that is not text, sometimes omitted,
// and one in twenty a body of a megabyte.
func modelResponse(n int) idemstore.Response {
	resp := idemstore.Response{
		Status: []int{201, 200, 422, 409}[n%4],
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {fmt.Sprintf("/r/%d", n)},
		},
		Body: []byte(fmt.Sprintf("{\"n\":%d}\x00\xff", n)),
	}
	if n%20 == 7 {
		resp.Body = bytes.Repeat(resp.Body, largeBodySize/len(resp.Body))
	}
	if n%3 == 0 {
		resp.Header["X-Multi"] = []string{"one", strconv.Itoa(n)}
	}
	if n%5 == 0 {
		resp.Omitted = true
	}
	return resp
}

// stored is resp as a store keeps it: an omitted body is not kept.
func stored(resp idemstore.Response) *idemstore.Response {
	if resp.Omitted {
		resp.Body = nil
	}
	return &resp
}

// tokenStep runs a Complete, Release or Abandon from a holder.
func (r *modelRun) tokenStep(op modelOp) (string, *modelFailure) {
	h := r.pickHolder(op.pick, op.late)
	name := map[opKind]string{opComplete: "complete", opRelease: "release", opAbandon: "abandon"}[op.kind]
	if h == nil {
		return name + ": no holder", nil
	}
	key := r.reqs[h.req].id
	id := r.id(h.req)
	line := fmt.Sprintf("h%d %s", h.n, name)
	var call func() error
	switch op.kind {
	case opComplete:
		resp := modelResponse(op.resp)
		line += fmt.Sprintf(" %d", resp.Status)
		if resp.Omitted {
			line += " (body omitted)"
		}
		call = func() error { return r.target.Store.Complete(r.ctx, id, h.token, resp) }
	case opRelease:
		call = func() error { return r.target.Store.Release(r.ctx, id, h.token) }
	default:
		line += " " + string(op.mode)
		call = func() error { return r.target.Store.Abandon(r.ctx, id, h.token, op.mode) }
	}
	row := r.rows[key]
	current := row != nil && row.token == h.token && row.state == idemstore.StateInFlight
	err := call()
	fenced := errors.Is(err, idemstore.ErrFenced)
	if err != nil && !fenced {
		return line + ": error", r.fail("error", "%s: %v", name, err)
	}
	if fenced {
		line += " → fenced"
	} else {
		line += " → ok"
	}
	switch {
	case !current && !fenced:
		return line, r.fail(name, "h%d's %s was not fenced, but the key's current token is not h%d's (model row: %s)", h.n, name, h.n, r.describeRow(row))
	case current && fenced && !r.expired(row):
		return line, r.fail(name, "h%d's %s was fenced, but h%d holds the key's current token (model row: %s)", h.n, name, h.n, r.describeRow(row))
	}
	label := name
	if op.kind == opAbandon {
		label += " " + string(op.mode)
	}
	if fenced {
		r.seen[label+" → fenced"]++
	} else {
		r.seen[label+" → ok"]++
	}
	if fenced {
		h.running = false
		if current && row.maybeGone {
			// The sweep had deleted it after all.
			delete(r.rows, key)
		}
		return line, nil
	}
	row.maybeGone = false
	switch op.kind {
	case opComplete:
		row.state = idemstore.StateCompleted
		row.resp = stored(modelResponse(op.resp))
		h.running = false
	case opRelease:
		delete(r.rows, key)
		h.running = false
	default:
		if op.mode == idemstore.Takeover {
			row.leaseUntil = r.now
			h.leaseUntil = r.now
		} else {
			row.state = idemstore.StateIndeterminate
			h.running = false
		}
	}
	return line, nil
}

func (r *modelRun) describeRow(row *mrow) string {
	if row == nil {
		return "absent"
	}
	s := fmt.Sprintf("%s %s %s token %s lease until +%s expires +%s", row.state, row.operation, row.body,
		row.token, fmtOffset(row.leaseUntil.Sub(r.start)), fmtOffset(row.expiresAt.Sub(r.start)))
	if row.maybeGone {
		s += " (maybe swept)"
	}
	return s
}

// sweepStep sweeps with a limit and checks the count. Which expired rows a
// sweep with a limit deletes is the store's choice, so after a sweep that
// may have left some, each is maybe gone.
func (r *modelRun) sweepStep(op modelOp) (string, *modelFailure) {
	sw, ok := r.target.Store.(idemstore.Sweeper)
	line := fmt.Sprintf("sweep limit %d", op.limit)
	if !ok {
		return line + ": not a sweeper", nil
	}
	var sure, maybe int
	for _, row := range r.rows {
		switch {
		case !r.expired(row):
		case row.maybeGone:
			maybe++
		default:
			sure++
		}
	}
	n, err := sw.Sweep(r.ctx, op.limit)
	if err != nil {
		return line + ": error", r.fail("error", "sweep: %v", err)
	}
	line += fmt.Sprintf(" → %d", n)
	if n > op.limit || n > sure+maybe || n < min(op.limit, sure) {
		return line, r.fail("sweep", "Sweep(%d) deleted %d rows; the model has %d expired rows and %d more that may be left", op.limit, n, sure, maybe)
	}
	if n > 0 {
		r.seen["sweep deleted rows"]++
	}
	allGone := n < op.limit || n == sure+maybe
	for key, row := range r.rows {
		if !r.expired(row) {
			continue
		}
		if allGone {
			delete(r.rows, key)
		} else {
			row.maybeGone = true
		}
	}
	return line, nil
}

// txClaimStep claims through ClaimTx and, when won, may let another request
// of the same key meet the open transaction, then ends it by Commit,
// Release or a crash. The transaction ends within the step: SQLite's open
// transaction holds the only write lock, and on PostgreSQL a stale
// holder's write would wait for the row it locks.
func (r *modelRun) txClaimStep(op modelOp) (string, *modelFailure) {
	mtx := r.target.Tx
	key := r.reqs[op.req].id
	c := r.newClaim(op, op.req)
	line := describeClaim("claimTx", c, r.reqs[op.req])
	var before *mrow
	if row := r.rows[key]; row != nil {
		cp := *row
		before = &cp
	}
	want := r.modelClaim(c, op.req)
	res, tx, err := mtx.Store.ClaimTx(r.ctx, c)
	if err != nil {
		return line + ": error", r.fail("error", "claimTx: %v", err)
	}
	line += " → " + r.viewResult(res).String()
	if f := r.compareClaim("claimTx", op.req, want, res); f != nil {
		if tx != nil {
			_ = tx.Rollback(r.ctx)
		}
		return line, f
	}
	if !res.Won {
		if tx != nil {
			_ = tx.Rollback(r.ctx)
			return line, r.fail("claimTx", "a lost ClaimTx returned a transaction")
		}
		return line, nil
	}
	if tx == nil {
		return line, r.fail("claimTx", "a won ClaimTx returned no transaction")
	}
	h := r.addHolder(c, op.req, true)
	line += fmt.Sprintf(" (h%d)", h.n)

	if op.probe >= 0 {
		pline, f := r.probe(op, key, op.req)
		line += "; " + pline
		if f != nil {
			_ = tx.Rollback(r.ctx)
			return line, f
		}
	}

	r.seen[[]string{"claimTx then commit", "claimTx then release", "claimTx then crash"}[op.end]]++
	restore := func() {
		if before == nil {
			delete(r.rows, key)
		} else {
			r.rows[key] = before
		}
	}
	switch op.end {
	case txCommit:
		resp := modelResponse(op.resp)
		line += fmt.Sprintf("; h%d commits %d", h.n, resp.Status)
		if err := tx.Commit(r.ctx, resp); err != nil {
			return line + ": error", r.fail("claimTx", "Commit of the transaction that holds the key: %v", err)
		}
		row := r.rows[key]
		row.state = idemstore.StateCompleted
		row.resp = stored(resp)
		h.running = false
	case txRelease:
		line += fmt.Sprintf("; h%d releases", h.n)
		if err := tx.Rollback(r.ctx); err != nil {
			return line + ": error", r.fail("claimTx", "Release of the transaction that holds the key: %v", err)
		}
		if mtx.Claims == storetest.TxClaimInTx {
			restore()
		} else {
			delete(r.rows, key)
		}
		h.running = false
	case txCrash:
		line += fmt.Sprintf("; h%d crashes", h.n)
		if err := mtx.Crash(r.ctx, tx); err != nil {
			return line + ": error", r.fail("error", "crash: %v", err)
		}
		h.crashed = true
		if mtx.Claims == storetest.TxClaimInTx {
			// The claim died with its transaction: the key is as it was, and
			// the holder's lease ended with it.
			restore()
			h.running = false
		}
	}
	return line, nil
}

// probe is a claim by another request of key while a transactional claim
// of request holderReq holds it; it must lose at once.
func (r *modelRun) probe(op modelOp, key idemstore.Identity, holderReq int) (string, *modelFailure) {
	var same []int
	for i, rq := range r.reqs {
		if rq.id == key {
			same = append(same, i)
		}
	}
	req := same[op.probe%len(same)]
	c := r.newClaim(op, req)
	line := describeClaim("claim", c, r.reqs[req])
	var want claimView
	if r.target.Tx.Claims == storetest.TxClaimInTx {
		// The row is not visible, but the store can tell whether the
		// holder is the prober's own request: it reports the key in
		// flight with no lease known, as the prober's request when it is
		// the same one, and with no fingerprint (so the engine answers 422)
		// when it is another.
		rq, hq := r.reqs[req], r.reqs[holderReq]
		want = claimView{State: idemstore.StateInFlight, Operation: rq.operation}
		if rq.operation == hq.operation && rq.body == hq.body {
			want.Fingerprint = rq.body
		}
	} else {
		want = r.modelClaim(c, req)
	}
	res, err := r.target.Store.Claim(r.ctx, c)
	if err != nil {
		return line + ": error", r.fail("error", "claim during an open transaction: %v", err)
	}
	line += " → " + r.viewResult(res).String()
	return line, r.compareClaim("claim during an open transaction", req, want, res)
}
