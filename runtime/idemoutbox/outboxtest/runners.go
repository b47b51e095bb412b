package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// stageMany commits n requests, each staging one receipt, and returns
// their effect keys.
func (f *fixture) stageMany(t *testing.T, n int) []string {
	t.Helper()
	eks := make([]string, n)
	for i := range n {
		k := fmt.Sprintf("k-%d", i)
		f.post(t, txPath, k, "", http.StatusCreated)
		eks[i] = f.h.effectKey(k)
	}
	return eks
}

// Runners at work at once on one outbox, each claiming in small batches,
// deliver every effect; under a lease longer than every delivery none is
// delivered twice.
func concurrentRunners(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	eks := f.stageMany(t, 60)
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	cfg.Batch, cfg.Workers = 3, 2
	runUntil(t, cfg, 4, pendingNone(t, f.inst.Outbox))
	for i, ek := range eks {
		if rcv.count(ek) == 0 {
			t.Errorf("k-%d's effect was never delivered", i)
		}
	}
	distinct, dups := rcv.totals()
	t.Logf("4 runners: %d effects delivered, %d duplicates", distinct, dups)
	if dups != 0 {
		t.Errorf("%d duplicate deliveries under a lease no delivery outlived", dups)
	}
}

// A runner that died holding an effect (it claimed it and recorded
// nothing) holds it only until its lease ends; then another runner
// delivers it.
func deadRunnersLease(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	ek := f.stageMany(t, 1)[0]
	const lease = 500 * time.Millisecond
	claimed, err := f.inst.Outbox.Claim(context.Background(), 10, lease, "a-runner-that-died")
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %d effects, %v", len(claimed), err)
	}
	at := time.Now()
	rcv := newReceiver()
	var deliveredAt time.Time
	runUntil(t, runnerConfig(f.inst.Outbox, rcv.deliver), 1, func() bool {
		if rcv.count(ek) > 0 && deliveredAt.IsZero() {
			deliveredAt = time.Now()
		}
		return !deliveredAt.IsZero()
	})
	if d := deliveredAt.Sub(at); d < lease-50*time.Millisecond {
		t.Errorf("delivered %v after another runner's claim of %v", d, lease)
	}
	m := f.all(t)[0]
	if m.Attempts != 2 {
		t.Errorf("attempts = %d, want 2 (the dead runner's and the delivery)", m.Attempts)
	}
}

// Once its context ends, a runner claims nothing more, gives back what it
// claimed and has not begun, and ends a delivery still under way when its
// drain time is up: Run returns within that bound, and nothing is lost.
func shutdownDrains(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	eks := f.stageMany(t, 3)
	rcv := newReceiver()
	rcv.hold, rcv.entered = make(chan struct{}), make(chan struct{}, 8)
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	cfg.Batch, cfg.Workers, cfg.Drain = 3, 1, 300*time.Millisecond
	r, err := idemoutbox.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan time.Time, 1)
	go func() {
		_ = r.Run(ctx)
		done <- time.Now()
	}()
	<-rcv.entered
	stopped := time.Now()
	cancel()
	var returned time.Time
	select {
	case returned = <-done:
	case <-time.After(cfg.Drain + 10*time.Second):
		t.Fatal("Run did not return after its drain")
	}
	if d := returned.Sub(stopped); d < cfg.Drain-50*time.Millisecond {
		t.Errorf("Run returned %v after its context ended, before the %v drain ended the delivery under way", d, cfg.Drain)
	}
	ms := f.all(t)
	var begun, givenBack int
	for _, m := range ms {
		switch {
		case m.State != idemoutbox.StatePending || !m.LeasedUntil.IsZero():
			t.Errorf("after shutdown: %+v, want pending and not leased", m)
		case m.Attempts == 1 && m.LastError != "":
			begun++
		case m.Attempts == 0:
			givenBack++
		}
	}
	if begun != 1 || givenBack != 2 {
		t.Errorf("after shutdown %d attempts were recorded failed and %d effects given back, want 1 and 2: %+v", begun, givenBack, ms)
	}
	close(rcv.hold)
	runUntil(t, runnerConfig(f.inst.Outbox, rcv.deliver), 1, pendingNone(t, f.inst.Outbox))
	for i, ek := range eks {
		if rcv.count(ek) != 1 {
			t.Errorf("k-%d's effect delivered %d times, want 1", i, rcv.count(ek))
		}
	}
}

// An effect whose deliveries keep dying with their runner (each claimed,
// none recorded) is dead once its attempts are spent, without another
// delivery: a poison message cannot take runners down for ever.
func interruptedAttempts(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	ek := f.stageMany(t, 1)[0]
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	for i := range cfg.MaxAttempts {
		if ms, err := f.inst.Outbox.Claim(context.Background(), 1, time.Millisecond, fmt.Sprintf("dying-%d", i)); err != nil || len(ms) != 1 {
			t.Fatalf("claim %d = %d effects, %v", i, len(ms), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	runUntil(t, cfg, 1, pendingNone(t, f.inst.Outbox))
	m := f.all(t)[0]
	if m.State != idemoutbox.StateDead || !strings.Contains(m.LastError, "none was recorded") || rcv.count(ek) != 0 {
		t.Errorf("after %d interrupted attempts: %+v, delivered %d times; want dead, undelivered", cfg.MaxAttempts, m, rcv.count(ek))
	}
}

// A Deliver that panics fails its attempt: the runner goes on, delivers
// the other effects, and the panicking one ends dead with the panic as
// its error.
func panickingReceiver(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.post(t, txPath, "k-ok", "", http.StatusCreated)
	f.post(t, txPath, "k-panic", "poison", http.StatusCreated)
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, func(ctx context.Context, m idemoutbox.Message) error {
		if m.Name == poison {
			panic("the receiver's client panics")
		}
		return rcv.deliver(ctx, m)
	})
	runUntil(t, cfg, 1, pendingNone(t, f.inst.Outbox))
	if rcv.count(f.h.effectKey("k-ok")) != 1 {
		t.Error("the other effect was not delivered")
	}
	dead, err := f.inst.Outbox.List(context.Background(), idemoutbox.Query{States: []idemoutbox.State{idemoutbox.StateDead}})
	if err != nil || len(dead) != 1 || !strings.Contains(dead[0].LastError, "panicked") {
		t.Errorf("dead = %+v, %v; want the panicking one", dead, err)
	}
}

// Delivered effects are deleted once Retain has passed; a dead one is
// kept for its operator.
func deliveredArePruned(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.stageMany(t, 2)
	f.post(t, txPath, "k-poison", "poison", http.StatusCreated)
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	cfg.MaxAttempts, cfg.Retain = 1, 20*time.Millisecond
	runUntil(t, cfg, 1, func() bool { return len(f.all(t)) == 1 })
	if m := f.all(t)[0]; m.State != idemoutbox.StateDead {
		t.Errorf("left after pruning: %+v, want the dead effect", m)
	}
	if distinct, _ := rcv.totals(); distinct != 2 {
		t.Errorf("%d effects delivered before pruning, want 2", distinct)
	}
}

// A Deliver that ignores the end of its context does not hold the
// shutdown: Run returns within its drain and the 5 s it gives the last
// records, and the effect stays leased, to be delivered again after its
// lease.
func shutdownBound(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	f.stageMany(t, 1)
	entered, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	cfg := runnerConfig(f.inst.Outbox, func(context.Context, idemoutbox.Message) error {
		defer close(finished)
		close(entered)
		<-release // whatever its context says
		return errors.New("gave up")
	})
	cfg.Drain = 100 * time.Millisecond
	r, err := idemoutbox.NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan time.Time, 1)
	go func() {
		_ = r.Run(ctx)
		returned <- time.Now()
	}()
	<-entered
	stopped := time.Now()
	cancel()
	bound := cfg.Drain + 5*time.Second
	select {
	case at := <-returned:
		if d := at.Sub(stopped); d < bound-50*time.Millisecond {
			t.Errorf("Run returned %v after its context ended, before it gave up on the delivery (%v)", d, bound)
		}
	case <-time.After(bound + 10*time.Second):
		t.Fatalf("Run did not return within %v of its context's end, held by a delivery", bound)
	}
	if m := f.all(t)[0]; m.State != idemoutbox.StatePending || m.LeasedUntil.IsZero() {
		t.Errorf("the abandoned delivery's effect is %+v, want pending under its lease", m)
	}
	close(release)
	<-finished
}

// Runners whose batches outlast their leases (six slow deliveries, one at
// a time, under a lease that covers five) deliver nothing twice: an
// effect that waited in its batch begins only while half its lease is
// left, and is given back to the other runner otherwise.
func slowBatches(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	eks := f.stageMany(t, 12)
	const lease, each = time.Second, 200 * time.Millisecond
	rcv := newReceiver()
	cfg := runnerConfig(f.inst.Outbox, func(ctx context.Context, m idemoutbox.Message) error {
		select {
		case <-time.After(each):
		case <-ctx.Done():
			return ctx.Err()
		}
		return rcv.deliver(ctx, m)
	})
	cfg.Batch, cfg.Workers, cfg.Lease = 6, 1, lease
	runUntil(t, cfg, 2, pendingNone(t, f.inst.Outbox))
	for i, ek := range eks {
		if n := rcv.count(ek); n != 1 {
			t.Errorf("k-%d's effect delivered %d times, want 1", i, n)
		}
	}
}
