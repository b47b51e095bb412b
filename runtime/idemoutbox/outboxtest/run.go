package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// Run runs the in-process scenarios on tg.
func Run(t *testing.T, tg Target) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, Target)
	}{
		{"CommittedIsDelivered", committedDelivered},
		{"RolledBackStagesNothing", rolledBackStagesNothing},
		{"OutsideATransaction", outsideTransaction},
		{"TooLarge", tooLarge},
		{"StagedTwice", stagedTwice},
		{"DeadLetter", deadLetter},
		{"ConcurrentRunners", concurrentRunners},
		{"SlowBatches", slowBatches},
		{"SlowRecord", slowRecord},
		{"GoneAtItsRecord", goneAtItsRecord},
		{"LateRecordOfAGivenID", lateRecordOfAGivenID},
		{"DeadRunnersLease", deadRunnersLease},
		{"ShutdownDrains", shutdownDrains},
		{"ShutdownBound", shutdownBound},
		{"InterruptedAttempts", interruptedAttempts},
		{"PanickingReceiver", panickingReceiver},
		{"DeliveredArePruned", deliveredArePruned},
		{"NoOutbox", noOutbox},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, tg) })
	}
}

// fixture is an instance with its engine and handler.
type fixture struct {
	inst Instance
	h    *handler
	es   *enginetest.EngineServer
}

func newFixture(t *testing.T, tg Target) *fixture {
	inst := tg.open(t)
	h := newHandler(inst)
	return &fixture{inst: inst, h: h, es: enginetest.ServeEngine(t, inst.Store, h, policies(time.Minute)...)}
}

// post sends one request of mode under key and fails unless its status
// is want.
func (f *fixture) post(t *testing.T, path, key, mode string, want int) {
	t.Helper()
	a := f.es.MustPost(t, path, key, body, "X-Mode", mode)
	if a.Status != want {
		t.Fatalf("POST %s key %s mode %q = %v, want %d", path, key, mode, a, want)
	}
}

// all lists every staged effect.
func (f *fixture) all(t *testing.T) []idemoutbox.Message {
	t.Helper()
	ms, err := f.inst.Outbox.List(context.Background(), idemoutbox.Query{})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// runnerConfig is a runner on s delivering to deliver, quick to retry.
func runnerConfig(s idemoutbox.Store, deliver idemoutbox.Deliver) idemoutbox.Config {
	return idemoutbox.Config{
		Store: s, Deliver: deliver,
		MaxAttempts: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Lease: 10 * time.Second, Poll: 10 * time.Millisecond, Drain: 5 * time.Second,
	}
}

// runUntil runs runners runners of cfg until done reports true, or fails
// the test after a minute.
func runUntil(t *testing.T, cfg idemoutbox.Config, runners int, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range runners {
		r, err := idemoutbox.NewRunner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}
	deadline := time.Now().Add(time.Minute)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if !done() {
		t.Fatal("the runners did not finish within a minute")
	}
}

// pendingNone reports whether no effect of s is pending.
func pendingNone(t *testing.T, s idemoutbox.Store) func() bool {
	return func() bool {
		ms, err := s.List(context.Background(), idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StatePending}})
		if err != nil {
			t.Error(err)
			return true
		}
		return len(ms) == 0
	}
}

// A committed request's effect is staged with the request's key and
// effect key, and delivered once with them.
func committedDelivered(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-1", "", http.StatusCreated)
	ms := f.all(t)
	if len(ms) != 1 {
		t.Fatalf("staged %d effects, want 1: %+v", len(ms), ms)
	}
	m := f.all(t)[0]
	ek := f.h.effectKey("k-1")
	if m.State != idemoutbox.StatePending || m.EffectKey != ek || ek == "" || m.Name != receipt ||
		string(m.Payload) != "k-1" || m.Tenant != "acme" || m.Scope != "createOrder" || m.Key != "k-1" {
		t.Fatalf("staged %+v; want pending receipt with effect key %q", m, ek)
	}
	rcv := newReceiver()
	runUntil(t, runnerConfig(f.inst.Outbox, rcv.deliver), 1, pendingNone(t, f.inst.Outbox))
	if n := rcv.count(ek); n != 1 {
		t.Errorf("the receiver got effect key %q %d times, want 1", ek, n)
	}
	m = f.all(t)[0]
	if m.State != idemoutbox.StateDelivered || m.DeliveredAt.IsZero() || m.Attempts != 1 {
		t.Errorf("after delivery: %+v", m)
	}
	// The replay of the request stages nothing more.
	f.post(t, txPath, "k-1", "", http.StatusCreated)
	if n := len(f.all(t)); n != 1 {
		t.Errorf("%d effects after a replay, want 1", n)
	}
}

// A request that rolls back, by a status the engine never keeps or by a
// panic, leaves no effect: nothing staged, nothing delivered.
func rolledBackStagesNothing(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-rollback", "rollback", http.StatusInternalServerError)
	f.post(t, txPath, "k-panic", "panic", http.StatusInternalServerError)
	for _, k := range []string{"k-rollback", "k-panic"} {
		if errs := f.h.stageErrs(k); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("%s: Stage = %v, want it to succeed inside the transaction", k, errs)
		}
		if n, err := f.inst.Count(context.Background(), k); err != nil || n != 0 {
			t.Fatalf("%s: %d business writes committed (%v); the request should have rolled back", k, n, err)
		}
	}
	if ms := f.all(t); len(ms) != 0 {
		t.Errorf("rolled-back requests left %d staged effects: %+v", len(ms), ms)
	}
	// A committed one after them is the only effect delivered.
	f.post(t, txPath, "k-ok", "", http.StatusCreated)
	rcv := newReceiver()
	runUntil(t, runnerConfig(f.inst.Outbox, rcv.deliver), 1, pendingNone(t, f.inst.Outbox))
	if distinct, dups := rcv.totals(); distinct != 1 || dups != 0 || rcv.count(f.h.effectKey("k-ok")) != 1 {
		t.Errorf("delivered %d effects (%d duplicates), want only k-ok's", distinct, dups)
	}
}

// Staging where nothing ties the effect to the request's writes is
// refused with ErrNotTransactional: under an operation that is not
// transactional, and outside any protected request.
func outsideTransaction(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, loosePath, "k-loose", "", http.StatusUnprocessableEntity)
	if errs := f.h.stageErrs("k-loose"); len(errs) != 1 || !errors.Is(errs[0], idemoutbox.ErrNotTransactional) {
		t.Errorf("Stage under an operation that is not transactional = %v, want ErrNotTransactional", errs)
	}
	if err := f.inst.Outbox.Stage(context.Background(), receipt, []byte("x")); !errors.Is(err, idemoutbox.ErrNotTransactional) {
		t.Errorf("Stage outside any request = %v, want ErrNotTransactional", err)
	}
	if ms := f.all(t); len(ms) != 0 {
		t.Errorf("%d effects staged outside a transaction", len(ms))
	}
}

// A payload over the limit is refused before anything is written: the
// handler answers a problem and nothing is staged.
func tooLarge(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-big", "big", http.StatusRequestEntityTooLarge)
	if errs := f.h.stageErrs("k-big"); len(errs) != 1 || !errors.Is(errs[0], idemoutbox.ErrTooLarge) {
		t.Errorf("Stage of %d bytes = %v, want ErrTooLarge", maxPayload+1, errs)
	}
	if ms := f.all(t); len(ms) != 0 {
		t.Errorf("an effect over the limit was staged: %+v", ms)
	}
}

// One name staged twice in a request is one effect: the second Stage is
// refused with ErrStagedTwice, and the transaction goes on to commit the
// first.
func stagedTwice(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-twice", "twice", http.StatusCreated)
	if errs := f.h.stageErrs("k-twice"); len(errs) != 1 || !errors.Is(errs[0], idemoutbox.ErrStagedTwice) {
		t.Errorf("second Stage = %v, want ErrStagedTwice", errs)
	}
	if n, err := f.inst.Count(context.Background(), "k-twice"); err != nil || n != 1 {
		t.Errorf("business writes = %d, %v; want the request committed", n, err)
	}
	if ms := f.all(t); len(ms) != 1 {
		t.Errorf("%d effects staged, want 1", len(ms))
	}
}

// An effect its receiver always refuses is dead after MaxAttempts, with
// its last error, while the effects staged around it are delivered; an
// operator's re-drive makes it pending again.
func deadLetter(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-a", "", http.StatusCreated)
	f.post(t, txPath, "k-poison", "poison", http.StatusCreated)
	f.post(t, txPath, "k-b", "", http.StatusCreated)
	time.Sleep(20 * time.Millisecond)
	if b, err := f.inst.Outbox.Backlog(context.Background()); err != nil || b.Pending != 3 || b.Dead != 0 || b.OldestPending < 20*time.Millisecond {
		t.Errorf("Backlog before delivery = %+v, %v; want 3 pending, the oldest at least 20ms old", b, err)
	}
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	var obs observer
	cfg.Observer = &obs
	runUntil(t, cfg, 1, pendingNone(t, f.inst.Outbox))
	if b, err := f.inst.Outbox.Backlog(context.Background()); err != nil || b != (idemoutbox.Backlog{Dead: 1}) {
		t.Errorf("Backlog after delivery = %+v, %v; want the 1 dead", b, err)
	}
	for _, k := range []string{"k-a", "k-b"} {
		if n := rcv.count(f.h.effectKey(k)); n != 1 {
			t.Errorf("%s's effect delivered %d times, want 1", k, n)
		}
	}
	dead, err := f.inst.Outbox.List(context.Background(), idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StateDead}})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Name != poison || dead[0].Attempts != cfg.MaxAttempts || dead[0].LastError == "" {
		t.Fatalf("dead effects = %+v, want the poison one after %d attempts with its error", dead, cfg.MaxAttempts)
	}
	if rcv.refused != cfg.MaxAttempts {
		t.Errorf("the receiver refused %d attempts, want %d", rcv.refused, cfg.MaxAttempts)
	}
	if got, want := obs.counts(), fmt.Sprint(map[idemoutbox.Outcome]int{"delivered": 2, "retried": 2, "dead": 1}); got != want {
		t.Errorf("observed %s, want %s", got, want)
	}
	if one, err := f.inst.Outbox.List(context.Background(), idemoutbox.Query{ID: dead[0].ID}); err != nil || len(one) != 1 || one[0].Name != poison {
		t.Errorf("List of effect %d = %+v, %v", dead[0].ID, one, err)
	}
	if err := f.inst.Outbox.Redrive(context.Background(), dead[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.inst.Outbox.Redrive(context.Background(), dead[0].ID); !errors.Is(err, idemoutbox.ErrNotDead) {
		t.Errorf("a second re-drive = %v, want ErrNotDead", err)
	}
	again, _ := f.inst.Outbox.List(context.Background(), idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StatePending}})
	if len(again) != 1 || again[0].ID != dead[0].ID || again[0].Attempts != 0 {
		t.Errorf("after re-drive pending = %+v", again)
	}
}

// observer counts outcomes.
type observer struct {
	mu sync.Mutex
	n  map[idemoutbox.Outcome]int
}

func (o *observer) ObserveEffect(_ context.Context, ev idemoutbox.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = make(map[idemoutbox.Outcome]int)
	}
	o.n[ev.Outcome]++
}

func (o *observer) counts() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.n)
}
