package outboxtest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// recordHeld is how long slowRecord keeps a delivery's record waiting:
// longer than any bound a runner could put on one record (5 s), and than
// the effect's lease.
const recordHeld = 7 * time.Second

// A delivery whose record has to wait, longer than the effect's lease
// and than any bound on one write, for a database held by someone else
// is recorded once the database is free, and delivered once: no runner of
// the process, its own or another, hands the effect out again while its
// record waits.
func slowRecord(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	ek := f.stageMany(t, 1)[0]
	rcv := newReceiver()
	rcv.hold, rcv.entered = make(chan struct{}), make(chan struct{}, 8)
	cfg := runnerConfig(f.inst.Outbox, rcv.deliver)
	// Short of recordHeld, and long enough for Block to take its locks
	// while the delivery is held on a loaded machine: a delivery still
	// held when its lease ends is given up, and rightly made again.
	cfg.Lease = 4 * time.Second
	go func() {
		<-rcv.entered
		release, err := f.inst.Block(context.Background())
		close(rcv.hold)
		if err != nil {
			t.Error(err)
			return
		}
		time.Sleep(recordHeld)
		release()
	}()
	// Once recorded, the effect is no runner's to claim: a while after
	// the record is enough for a second delivery, begun before it, to
	// show.
	runUntil(t, cfg, 2, func() bool { return f.deliveredFor(t, ek) >= 500*time.Millisecond })
	m := f.all(t)[0]
	if n := rcv.count(ek); n != 1 || m.State != idemoutbox.StateDelivered {
		t.Errorf("delivered %d times, and the effect is %+v; want it delivered once, and recorded", n, m)
	}
}

// deliveredFor is how long the effect ek has been recorded delivered, 0
// while it is not.
func (f *fixture) deliveredFor(t *testing.T, ek string) time.Duration {
	t.Helper()
	for _, m := range f.all(t) {
		if m.EffectKey == ek && m.State == idemoutbox.StateDelivered {
			return time.Since(m.DeliveredAt)
		}
	}
	return 0
}

// A delivery whose effect is gone when the runner records it (delivered
// and recorded by another process, which then pruned it) is done: the
// outbox reports it gone (idemoutbox.ErrGone), the runner does not try
// the record again, and it goes on to the next effect.
func goneAtItsRecord(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	eks := f.stageMany(t, 2)
	rcv := newReceiver()
	o := &recordCounter{Outbox: f.inst.Outbox, tries: map[string]int{}}
	var gone idemoutbox.Message
	cfg := runnerConfig(o, func(ctx context.Context, m idemoutbox.Message) error {
		if m.EffectKey == eks[0] {
			gone = m
			if _, err := f.inst.Outbox.Delivered(ctx, m); err != nil {
				return err
			}
			if _, err := f.inst.Outbox.Prune(ctx, 0, 10); err != nil {
				return err
			}
		}
		return rcv.deliver(ctx, m)
	})
	cfg.Batch, cfg.Workers = 1, 1
	runUntil(t, cfg, 1, func() bool { return rcv.count(eks[1]) == 1 })
	if n := o.count(eks[0]); n != 1 {
		t.Errorf("the record of the gone effect was tried %d times, want once", n)
	}
	if _, err := f.inst.Outbox.Delivered(context.Background(), gone); !errors.Is(err, idemoutbox.ErrGone) {
		t.Errorf("Delivered of a gone effect = %v, want ErrGone", err)
	}
}

// A runner's late record of an effect that is gone (delivered and
// recorded by another runner, then pruned) reaches no other effect that
// was given the gone one's id since: a table whose ids are not from a
// sequence that only goes up (SQLite's rowid, the largest one deleted;
// PostgreSQL's identity after a setval, docs/semantics.md §7.2) gives an
// id again, and a record by id alone would mark the new effect delivered,
// never sent, or dead, or give it back. Every record names the row by
// its identity too.
func lateRecordOfAGivenID(t *testing.T, tg Target) {
	f := newFixture(t, tg)
	ctx := context.Background()
	f.stageMany(t, 1)
	old, err := f.inst.Outbox.Claim(ctx, 10, time.Minute, "runner-A")
	if err != nil || len(old) != 1 {
		t.Fatalf("runner A's claim = %v, %v", old, err)
	}
	if _, err := f.inst.Outbox.Delivered(ctx, old[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := f.inst.Outbox.Prune(ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	f.post(t, txPath, "k-next", "", http.StatusCreated)
	next, err := f.inst.Outbox.Claim(ctx, 10, time.Minute, "runner-A")
	if err != nil || len(next) != 1 {
		t.Fatalf("runner A's claim of the next effect = %v, %v", next, err)
	}
	if _, err := f.inst.Outbox.Delivered(ctx, old[0]); !errors.Is(err, idemoutbox.ErrGone) {
		t.Errorf("the late record of the gone effect (id %d) = %v, want ErrGone; the next effect has id %d", old[0].ID, err, next[0].ID)
	}
	if err := f.inst.Outbox.Failed(ctx, old[0], "runner-A", "late", 0, true); err != nil {
		t.Fatal(err)
	}
	if err := f.inst.Outbox.Release(ctx, old[0], "runner-A"); err != nil {
		t.Fatal(err)
	}
	ms := f.all(t)
	if len(ms) != 1 || ms[0].State != idemoutbox.StatePending || ms[0].Attempts != 1 || ms[0].LeasedUntil.IsZero() {
		t.Errorf("the next effect, held by runner A and never delivered, is %+v after late records of the gone effect (id %d)",
			ms, old[0].ID)
	}
}

// recordCounter counts the records of each effect key's deliveries.
type recordCounter struct {
	Outbox
	mu    sync.Mutex
	tries map[string]int
}

func (o *recordCounter) Delivered(ctx context.Context, m idemoutbox.Message) (time.Duration, error) {
	o.mu.Lock()
	o.tries[m.EffectKey]++
	o.mu.Unlock()
	return o.Outbox.Delivered(ctx, m)
}

func (o *recordCounter) count(ek string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tries[ek]
}
