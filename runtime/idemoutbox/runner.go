package idemoutbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Deliver hands one staged effect to its receiver: an e-mail service, a
// webhook, a queue. It returns nil once the receiver has accepted it.
// It may be called more than once for one effect (a runner killed between
// the receiver's acceptance and its record, or a delivery that outlives
// its lease), always with the same m.EffectKey: a receiver that honours
// the key acts once. ctx ends when the delivery's lease does, or when a
// shutting-down runner's drain time is up.
type Deliver func(ctx context.Context, m Message) error

// Config configures a Runner. Zero fields take the defaults below.
type Config struct {
	Store   Store
	Deliver Deliver
	// MaxAttempts bounds the deliveries of one effect; after the last
	// failed one it is dead. Default 8.
	MaxAttempts int
	// Backoff is the wait before the second attempt; each later one waits
	// twice as long, up to MaxBackoff, less a random part of up to half
	// (jitter), so that effects failing together do not retry together.
	// Defaults 1s and 5m.
	Backoff, MaxBackoff time.Duration
	// Lease is how long a claimed effect is the runner's alone, and so
	// the longest a delivery may take: its context ends with the lease,
	// since past it another runner may deliver it again. An effect of a
	// batch that waited for a worker begins only while half its lease is
	// left, and is given back otherwise. A killed runner's effects are
	// delivered by another, or by itself once restarted, after their
	// lease. Default 1m.
	Lease time.Duration
	// Batch is the most effects claimed at once, and Workers how many of
	// them are delivered at the same time. Defaults 16 and 4.
	Batch, Workers int
	// Poll is the wait before looking again when nothing is due.
	// Default 1s.
	Poll time.Duration
	// Drain bounds the shutdown: once Run's context ends, deliveries
	// under way get this long to finish before their contexts end.
	// Default 10s.
	Drain time.Duration
	// Retain is how long a delivered effect is kept, for operators to
	// see, before a runner deletes it. Dead effects are kept until an
	// operator re-drives them. Default 7 days.
	Retain   time.Duration
	Observer Observer
	Logger   *slog.Logger
}

// pruneEvery is the most often a runner deletes delivered effects; a
// Retain shorter than it prunes as often as Retain.
const pruneEvery = time.Minute

// pruneBatch is the most effects one delete removes.
const pruneBatch = 1000

// recordTimeout bounds each write that records a failed attempt or gives
// an effect back, and how long a stopping runner goes on with its writes
// after Drain, all of them together (stopping.records): Run returns at
// most Drain plus recordTimeout after its context ends. It is also the
// longest wait between two tries of a delivery's record, which has no
// bound of its own (recordDelivery).
const recordTimeout = 5 * time.Second

// Runner delivers staged effects at least once (docs/semantics.md §8.3).
// Any number of runners may run at once, in the service's processes or
// in processes of their own, on one database: each effect is held by one
// of them at a time (a lease), and a killed runner's effects pass to the
// others after their lease.
type Runner struct {
	cfg Config
	// records are the Store's Records, shared with the process's other
	// runners on it, or the runner's own when it has none.
	records *Records
}

// NewRunner returns a runner of cfg, or an error when it lacks a Store or
// a Deliver function or a field is negative.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Deliver == nil {
		return nil, errors.New("idemoutbox: a runner needs a Store and a Deliver function")
	}
	if cfg.MaxAttempts < 0 || cfg.Backoff < 0 || cfg.MaxBackoff < 0 || cfg.Lease < 0 ||
		cfg.Batch < 0 || cfg.Workers < 0 || cfg.Poll < 0 || cfg.Drain < 0 || cfg.Retain < 0 {
		return nil, errors.New("idemoutbox: a runner's limits are not negative")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.Backoff, time.Second)
	def(&cfg.MaxBackoff, 5*time.Minute)
	def(&cfg.Lease, time.Minute)
	def(&cfg.Poll, time.Second)
	def(&cfg.Drain, 10*time.Second)
	def(&cfg.Retain, 7*24*time.Hour)
	for _, v := range []struct {
		p *int
		d int
	}{{&cfg.MaxAttempts, 8}, {&cfg.Batch, 16}, {&cfg.Workers, 4}} {
		if *v.p == 0 {
			*v.p = v.d
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{cfg: cfg, records: &Records{}}
	if s, ok := cfg.Store.(recordsOf); ok {
		r.records = s.Records()
	}
	return r, nil
}

// Run delivers due effects until ctx ends, then drains: it claims no
// more, gives back the effects it claimed and has not begun, and waits
// up to Config.Drain for the deliveries under way, ending their contexts
// after that and recording them as failed. It returns nil after a drain,
// and never on its own: a store that fails is logged and tried again
// after Poll. A Deliver that ignores the end of its context is left
// behind: Run returns at most Drain plus 5 s after ctx ends, and that
// effect is delivered again after its lease.
func (r *Runner) Run(ctx context.Context) error {
	deliveries, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	records, endRecords := context.WithCancel(context.WithoutCancel(ctx))
	defer endRecords()
	s := stopping{deliveries: deliveries, records: records, abandon: make(chan struct{}), recorded: &sync.WaitGroup{}}
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(r.cfg.Drain, cancel)
		time.AfterFunc(r.cfg.Drain+recordTimeout, func() {
			endRecords()
			close(s.abandon)
		})
	})
	defer stop()
	var pruned time.Time
	for ctx.Err() == nil {
		n, err := r.round(ctx, s)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.ErrorContext(ctx, "idemoutbox: claiming due effects failed", "err", err)
		}
		if n < r.cfg.Batch {
			// Idle: a moment to delete what is past keeping.
			if time.Since(pruned) >= min(pruneEvery, r.cfg.Retain) {
				r.prune(ctx)
				pruned = time.Now()
			}
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.Poll):
			}
		}
	}
	s.wait(s.recorded)
	return nil
}

// stopping is how a Run ends: deliveries is the deliveries' context,
// ended Drain after Run's; records, the context of the runner's writes,
// and abandon, closed, end when Run stops waiting for them, Drain plus
// recordTimeout after Run's. recorded counts the deliveries' records
// under way, which no round waits for.
type stopping struct {
	deliveries, records context.Context
	abandon             chan struct{}
	recorded            *sync.WaitGroup
}

// write is the context of one write of the runner's other than a
// delivery's record: recordTimeout from now, and no later than the end of
// all its writes.
func (s stopping) write() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.records, recordTimeout)
}

// wait waits for wg until Run stops waiting, and reports whether wg was
// done.
func (s stopping) wait(wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-s.abandon:
		return false
	}
}

// round claims one batch and delivers it, returning how many it claimed.
func (r *Runner) round(ctx context.Context, s stopping) (int, error) {
	token, err := newToken()
	if err != nil {
		return 0, err
	}
	// The lease is measured by the store's clock from the claim; read
	// before the claim, this end comes no later than the store's.
	leaseEnd := time.Now().Add(r.cfg.Lease)
	msgs, err := r.cfg.Store.Claim(ctx, r.cfg.Batch, r.cfg.Lease, token)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.Workers)
	for _, m := range msgs {
		if r.records.recording(m.ID) {
			// Delivered, and this runner or another of this process is
			// still recording it: leave it under this claim's lease.
			continue
		}
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		// Shutting down, or too little of the lease is left for a
		// delivery to end inside it, while the batch waited for a
		// worker: give it back, rather than begin a delivery that
		// another runner could make again once the lease ends.
		if !acquired || ctx.Err() != nil || time.Until(leaseEnd) < r.cfg.Lease/2 {
			if acquired {
				<-sem
			}
			r.release(ctx, s, m, token)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.deliver(ctx, s, m, token, leaseEnd)
		})
	}
	if !s.wait(&wg) {
		r.cfg.Logger.ErrorContext(ctx, "idemoutbox: a delivery went on after its context ended; the runner returns without it, and its effect is delivered again after its lease")
	}
	return len(msgs), nil
}

// deliver makes one attempt at m, ending its context when m's lease
// does, and records its outcome: a failure before it returns, a delivery
// beside the rounds that follow (recordDelivery), with m held in the
// runner's Records until it is recorded.
func (r *Runner) deliver(ctx context.Context, s stopping, m Message, token string, leaseEnd time.Time) {
	var err error
	if m.Attempts > r.cfg.MaxAttempts {
		// Deliveries began that were never recorded: the runners making
		// them died (an effect that kills its runner, say).
		err = fmt.Errorf("%d attempts began and none was recorded", m.Attempts-1)
	} else {
		dctx, cancel := context.WithDeadline(s.deliveries, leaseEnd)
		err = r.call(dctx, m)
		cancel()
	}
	if err == nil {
		release := r.records.hold(m.ID)
		s.recorded.Go(func() {
			defer release()
			r.recordDelivery(ctx, s.records, m)
		})
		return
	}
	r.recordFailure(ctx, s, m, token, err)
}

// recordDelivery records m's delivery, under records alone: a record that
// fails is tried again, a while later, until it succeeds or the runner
// stops waiting for its records. Given up, it would hand m to its
// receiver again after its lease, although only the database was slow;
// and while it is under way, this runner and the others of the process
// that share the Store's Records pass m over. No round waits for it, so
// a record that cannot succeed holds up m alone. An effect that is gone
// (ErrGone) is recorded already, or no longer anyone's to record.
func (r *Runner) recordDelivery(ctx, records context.Context, m Message) {
	for try := 1; ; try++ {
		lag, err := r.cfg.Store.Delivered(records, m)
		switch {
		case err == nil:
			Observe(ctx, r.cfg.Observer, Event{Name: m.Name, Outcome: OutcomeDelivered, Attempt: m.Attempts, Lag: lag})
			return
		case errors.Is(err, ErrGone):
			r.cfg.Logger.InfoContext(ctx, "idemoutbox: a delivered effect was gone from the outbox when its delivery was recorded", "effect", m.Name, "id", m.ID)
			return
		}
		if records.Err() != nil {
			r.cfg.Logger.ErrorContext(ctx, "idemoutbox: an effect was delivered but its delivery could not be recorded; it will be delivered again after its lease",
				"effect", m.Name, "id", m.ID, "err", err)
			return
		}
		if try == 1 {
			r.cfg.Logger.WarnContext(ctx, "idemoutbox: recording a delivery failed; it is tried again until it is recorded or the runner stops",
				"effect", m.Name, "id", m.ID, "err", err)
		}
		select {
		case <-records.Done():
		case <-time.After(min(r.backoff(try), recordTimeout)):
		}
	}
}

// recordFailure records the failed attempt at m, held under token, as
// retried or, after the last attempt, dead.
func (r *Runner) recordFailure(ctx context.Context, s stopping, m Message, token string, err error) {
	rctx, cancel := s.write()
	defer cancel()
	dead := m.Attempts >= r.cfg.MaxAttempts
	outcome := OutcomeRetried
	if dead {
		outcome = OutcomeDead
		r.cfg.Logger.WarnContext(ctx, "idemoutbox: an effect is dead after its last attempt failed",
			"effect", m.Name, "id", m.ID, "attempts", m.Attempts, "err", err)
	}
	if rerr := r.cfg.Store.Failed(rctx, m, token, err.Error(), r.backoff(m.Attempts), dead); rerr != nil {
		r.cfg.Logger.ErrorContext(ctx, "idemoutbox: a failed delivery could not be recorded; it is tried again after its lease",
			"effect", m.Name, "id", m.ID, "err", rerr)
		return
	}
	Observe(ctx, r.cfg.Observer, Event{Name: m.Name, Outcome: outcome, Attempt: m.Attempts, Err: err})
}

// prune deletes the effects delivered longer ago than Retain, a batch at
// a time.
func (r *Runner) prune(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.cfg.Store.Prune(ctx, r.cfg.Retain, pruneBatch)
		if err != nil {
			r.cfg.Logger.ErrorContext(ctx, "idemoutbox: deleting delivered effects failed", "err", err)
		}
		if n < pruneBatch {
			return
		}
	}
}

// call hands m to Deliver; a panic there fails the attempt, not the
// runner.
func (r *Runner) call(ctx context.Context, m Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the delivery panicked: %v", p)
		}
	}()
	return r.cfg.Deliver(ctx, m)
}

// release gives back m, claimed but not begun.
func (r *Runner) release(ctx context.Context, s stopping, m Message, token string) {
	rctx, cancel := s.write()
	defer cancel()
	if err := r.cfg.Store.Release(rctx, m, token); err != nil {
		r.cfg.Logger.ErrorContext(ctx, "idemoutbox: an effect could not be given back; it is due again after its lease",
			"effect", m.Name, "id", m.ID, "err", err)
	}
}

// backoff is the wait after failed attempt n (from 1): Backoff doubled
// n-1 times, at most MaxBackoff, less up to half of it at random.
func (r *Runner) backoff(n int) time.Duration {
	d := r.cfg.Backoff
	for i := 1; i < n && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	return d - rand.N(d/2+1)
}

// newToken is a claim's lease token.
func newToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idemoutbox: lease token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
