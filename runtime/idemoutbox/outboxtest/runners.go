package outboxtest

import (
	"context"
	"fmt"
	"net/http"
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
