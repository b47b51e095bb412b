package lincheck

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// drainBound is how long the final drain may take: the leases of a killed
// runner's effects (2 s) and the retries of refused deliveries, on a
// loaded machine.
const drainBound = 30 * time.Second

// drainKill is the kind of the kill that begins the final drain.
const drainKill = "kill -9 (drain)"

// undeliveredQuery counts the staged effects not delivered yet.
const undeliveredQuery = "SELECT count(*) FROM idempotency_outbox WHERE state <> 'delivered'"

// effectsRun is r in the effects mode, with the processor and the
// receiver it reaches: each execution charges the processor and, on a
// store with an outbox (one r can count on), stages a receipt; after the
// clients stop the service is killed once more and restarted with no
// fault, and runs until its runner has delivered every staged receipt.
// broken names a broken version of the mode, or is empty; the processor
// and the receiver between them kill the service about once a gap, each
// at its own point.
func effectsRun(t *testing.T, r run, broken string, gap time.Duration) (run, *processor, *receiver) {
	pk, rk := &killer{gap: 2 * gap}, &killer{gap: 2 * gap}
	p, rc := newProcessor(t, pk), newReceiver(t, rk)
	r.arm = func(kill func(kind string)) {
		pk.set(kill)
		rk.set(kill)
	}
	r.name += " effects"
	r.smallBodies = true
	r.env = append(r.env[:len(r.env):len(r.env)], envProcessor+"="+p.srv.URL, envReceiver+"="+rc.srv.URL)
	if broken != "" {
		r.name += " " + broken
		r.env = append(r.env, envBroken+"="+broken)
	}
	if r.count == nil {
		return r, p, rc
	}
	r.settle = func(svc *service, since func() int64) ([]window, error) {
		w := window{Kind: drainKill, Start: since()}
		err := svc.restart()
		w.End = since()
		if err != nil {
			return []window{w}, fmt.Errorf("restart for the drain: %w", err)
		}
		n, err := 0, error(nil)
		for end := time.Now().Add(drainBound); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if n, err = r.count(undeliveredQuery); err == nil && n == 0 {
				return []window{w}, nil
			}
		}
		return []window{w}, fmt.Errorf("%d effects undelivered %v after the restart (%v)", n, drainBound, err)
	}
	return r, p, rc
}

// sideReport is what an effects run's processor and receiver recorded.
type sideReport struct {
	calls, charges []call
	deliveries     []delivery
	refused        int
	// phases are the charge's recovery points the store recorded, when
	// the run can read them (run.phases).
	phases []phaseRecord
	// receipts: the store has an outbox, and every execution staged a
	// receipt.
	receipts bool
}

// effectFigures counts what an effects run saw, for the log and
// docs/verification.md.
type effectFigures struct {
	committed, charges, calls, repeatedCalls int
	phases                                   int
	chargedUncommitted                       int
	deliveries, refused, duplicates          int
	duplicatesBy                             map[string]int
	receipts                                 bool
}

func (f effectFigures) String() string {
	var by []string
	for k, n := range f.duplicatesBy {
		by = append(by, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(by)
	charges := fmt.Sprintf("%d committed requests, %d charges (%d of requests that never committed), %d processor calls (%d repeated), %d charge phases read back",
		f.committed, f.charges, f.chargedUncommitted, f.calls, f.repeatedCalls, f.phases)
	if !f.receipts {
		return charges + ", no outbox"
	}
	return fmt.Sprintf("%s, %d receipts delivered (%d duplicates [%s]), %d deliveries refused by the receiver",
		charges, f.deliveries, f.duplicates, strings.Join(by, ", "), f.refused)
}

// checkSideEffects judges the effects of rep against what the processor
// and the receiver recorded: every committed request charged exactly once
// and its receipt delivered at least once; no second charge for a logical
// request (a key and its body) however often its handler ran; no receipt
// but a committed request's; every delivery of a receipt beyond its first
// preceded by a fault that can explain it; and, where the recorded phases
// are read back, no call to the processor after its phase was recorded.
func checkSideEffects(rep report, s sideReport) ([]string, effectFigures) {
	f := effectFigures{charges: len(s.charges), calls: len(s.calls), deliveries: len(s.deliveries), refused: s.refused, duplicatesBy: map[string]int{}, receipts: s.receipts}
	var violations []string
	bodyOf := map[string]string{}
	for _, o := range rep.ops {
		bodyOf[o.Req] = o.Body
	}
	// committed: the run each key committed, by its logical request.
	committed := map[string]effect{}
	for key, es := range rep.effects {
		if len(es) > 0 {
			committed[logical(key, bodyOf[es[0].Req])] = es[0]
		}
	}
	f.committed = len(committed)
	at := func(t time.Time) int64 { return t.Sub(rep.start).Nanoseconds() }

	chargesOf := map[string][]call{}
	for _, c := range s.charges {
		chargesOf[c.Request] = append(chargesOf[c.Request], c)
	}
	for req, cs := range chargesOf {
		if len(cs) > 1 {
			violations = append(violations, fmt.Sprintf("request %s: the processor charged %d times (%v)", req, len(cs), cs))
		}
		if _, ok := committed[req]; !ok {
			f.chargedUncommitted++
		}
	}
	for req := range committed {
		if len(chargesOf[req]) == 0 {
			violations = append(violations, fmt.Sprintf("request %s: committed, and the processor never charged it", req))
		}
	}
	violations = append(violations, repeatedCalls(s, &f)...)
	if !s.receipts {
		return violations, f
	}

	delivered := map[string][]delivery{}
	for _, d := range s.deliveries {
		r := d.Receipt
		req := logical(r.Key, r.Body)
		e, ok := committed[req]
		switch {
		case !ok || e.Run != r.Run:
			violations = append(violations, fmt.Sprintf("request %s: a receipt of run %s (request %s) was delivered, and that run never committed (the committed run: %q)", req, r.Run, r.Req, e.Run))
		case len(chargesOf[req]) > 0 && chargesOf[req][0].Charge != r.Charge:
			violations = append(violations, fmt.Sprintf("request %s: the receipt names charge %s, the processor made %s", req, r.Charge, chargesOf[req][0].Charge))
		}
		delivered[req+" "+r.Run] = append(delivered[req+" "+r.Run], d)
	}
	for req, e := range committed {
		if len(delivered[req+" "+e.Run]) == 0 {
			violations = append(violations, fmt.Sprintf("request %s: committed by %s (run %s), and its receipt was never delivered", req, e.Req, e.Run))
		}
	}
	for _, ds := range delivered {
		violations = append(violations, duplicateDeliveries(ds, rep.windows, at, &f)...)
	}
	return violations, f
}

// phaseSlack is how long after its record a phase may still be missed
// by a run that looked for it just before: the record's own commit, and a
// load that went out before it.
const phaseSlack = time.Second

// repeatedCalls counts the calls to the processor with an effect key it
// had already seen, and checks the recorded phases, where the run reads
// them: each holds a charge the processor made, and no call under that
// charge's effect key came after the phase was recorded (phaseSlack
// aside), since a run that finds a recorded phase does not call again.
func repeatedCalls(s sideReport, f *effectFigures) []string {
	var violations []string
	chargeOf := map[string]string{} // the charge id of each effect key
	made := map[string]bool{}
	for _, c := range s.charges {
		chargeOf[c.EffectKey] = c.Charge
		made[c.Charge] = true
	}
	recorded := map[string]time.Time{} // when the phase holding each charge was recorded
	for _, ph := range s.phases {
		if !made[ph.Result] {
			violations = append(violations, fmt.Sprintf("a recorded charge phase holds %q, which the processor never charged", ph.Result))
		}
		recorded[ph.Result] = ph.At
	}
	f.phases = len(s.phases)
	seen := map[string]bool{}
	for _, c := range s.calls {
		if seen[c.EffectKey] {
			f.repeatedCalls++
		}
		seen[c.EffectKey] = true
		if at, ok := recorded[chargeOf[c.EffectKey]]; ok && c.At.After(at.Add(phaseSlack)) {
			violations = append(violations, fmt.Sprintf("request %s: the processor was called under effect key %s at %s, %v after its charge's phase was recorded: a recorded phase ran again", c.Request, c.EffectKey, c.At.Format(time.StampMilli), c.At.Sub(at)))
		}
	}
	return violations
}

// duplicateDeliveries counts the deliveries of one receipt beyond its
// first, by the fault that explains each, and refuses one that no fault
// between it and the delivery before explains: only a runner that died,
// or could not reach its store, between a delivery and its record delivers
// a receipt again.
func duplicateDeliveries(ds []delivery, windows []window, at func(time.Time) int64, f *effectFigures) []string {
	var violations []string
	for i := 1; i < len(ds); i++ {
		f.duplicates++
		kind := faultBetween(windows, at(ds[i-1].At), at(ds[i].At))
		if kind == "" {
			r := ds[i].Receipt
			violations = append(violations, fmt.Sprintf("key %s: the receipt of run %s was delivered again at %.3fs, after %.3fs, with no fault between", r.Key, r.Run, float64(at(ds[i].At))/1e9, float64(at(ds[i-1].At))/1e9))
			continue
		}
		f.duplicatesBy[kind]++
	}
	return violations
}

// faultBetween names a fault in force at some moment from a to b, kill -9
// first, or is empty when none was.
func faultBetween(windows []window, a, b int64) string {
	kind := ""
	for _, w := range windows {
		if w.Start <= b && a <= w.End+faultGrace.Nanoseconds() {
			if strings.HasPrefix(w.Kind, "kill -9") {
				return w.Kind
			}
			kind = w.Kind
		}
	}
	return kind
}

// effectsHistory runs r in the effects mode, broken or not, for d with
// seed sd and a kill by the processor or the receiver about once a gap,
// and returns its report, what the processor and the receiver recorded
// and the store's recorded phases, where r reads them.
func effectsHistory(t *testing.T, r run, broken string, d, gap time.Duration, sd uint64) (run, report, sideReport) {
	r, p, rc := effectsRun(t, r, broken, gap)
	rep := history(t, r, d, sd)
	s := sideReport{receipts: r.count != nil}
	if r.phases != nil {
		var err error
		if s.phases, err = r.phases(); err != nil {
			t.Fatalf("read the recorded phases back: %v", err)
		}
	}
	s.calls, s.charges = p.record()
	s.deliveries, s.refused = rc.record()
	return r, rep, s
}

// checkEffectsRun runs r in the effects mode and fails t on every
// violation of the contract, of the history and of the effects.
func checkEffectsRun(t *testing.T, r run) {
	sd, d := seed(t), duration(t)
	r, rep, s := effectsHistory(t, r, "", d, killGap, sd)
	violations, viz := check(rep, r.model)
	fx, f := checkSideEffects(rep, s)
	violations = append(violations, fx...)
	t.Logf("lincheck %s seed %d, %v: %s; effects: %s; %d violations", r.name, sd, d, summary(rep), f, len(violations))
	for _, v := range violations {
		t.Error(v)
	}
	if viz != "" {
		t.Errorf("porcupine's visualization of the history: %s", viz)
	}
}

// The effects of SQLite's run: SQLite records no phase beside the
// request's transaction, so every run of a request calls the processor,
// under the one effect key the processor charges once.
func TestEffectsSQLite(t *testing.T) {
	r, _ := sqliteRun(t)
	checkEffectsRun(t, r)
}

// The charges of a single Redis's run, under its proxy's faults and
// kill -9: the charge is a recovery point, and with no outbox there is no
// receipt. The memory store has no effects run: it lives in the service's
// process, so no fault but a hang-up can make a handler run again, and
// enginetest.PhaseStorm covers its phases.
func TestEffectsRedis(t *testing.T) {
	checkEffectsRun(t, redisRun(t))
}

// The charges of a Redis Cluster's run, under its proxies' faults,
// failovers and kill -9: the charge is a recovery point, which a failover
// must not lose once recorded (a FORCE failover may: the repeated call
// then carries the same effect key), and with no outbox there is no
// receipt.
func TestEffectsRedisCluster(t *testing.T) {
	checkEffectsRun(t, clusterRun(t))
}

// The effects of PostgreSQL's run, under its proxy's faults, terminated
// backends and kill -9: the charge is a recovery point recorded beside the
// request's transaction.
func TestEffectsPostgreSQL(t *testing.T) {
	checkEffectsRun(t, postgresRun(t))
}
