package sqliteoutbox

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// recorder gathers the deliveries waiting to be recorded, so that the
// first of their records to have the write turn writes them all, in one
// transaction: behind a storm of claims, which lets the runners' writes
// in one at a time (sqlitestore's BeginTurn), the records of a batch of
// deliveries take one turn instead of one each. The zero recorder holds
// nothing.
type recorder struct {
	mu     sync.Mutex
	queued []*record
}

// record is one delivery to record. done is closed once a write that
// took it has ended, with lag or err set; taken ends its own wait for
// the write turn, when another's write takes it.
type record struct {
	m     idemoutbox.Message
	lag   time.Duration
	err   error
	done  chan struct{}
	taken context.CancelFunc
}

// add queues the record of m, whose wait for the turn taken ends.
func (r *recorder) add(m idemoutbox.Message, taken context.CancelFunc) *record {
	d := &record{m: m, done: make(chan struct{}), taken: taken}
	r.mu.Lock()
	r.queued = append(r.queued, d)
	r.mu.Unlock()
	return d
}

// take returns every queued record, which the caller finishes, and ends
// their waits for the turn.
func (r *recorder) take() []*record {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.queued
	r.queued = nil
	for _, d := range ds {
		d.taken()
	}
	return ds
}

// withdraw takes d out of the queue, and reports whether it was there:
// when it was not, a write took it, and finishes it.
func (r *recorder) withdraw(d *record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.queued, d)
	if i >= 0 {
		r.queued = slices.Delete(r.queued, i, i+1)
	}
	return i >= 0
}

// finish ends the records ds, all failed with err when the write that
// took them failed.
func finish(ds []*record, err error) {
	for _, d := range ds {
		if err != nil {
			d.err = err
		}
		close(d.done)
	}
}

// Delivered implements idemoutbox.Store. Its record waits for the write
// turn with the others under way, and is written with them by the first
// to have it.
func (o *Outbox) Delivered(ctx context.Context, m idemoutbox.Message) (time.Duration, error) {
	// Taken by another's write, it stops waiting for the turn.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := o.recorder.add(m, cancel)
	var taken []*record
	err := o.writeAfter(wctx, ctx, func(tx *sqlitestore.Tx) error {
		taken = o.recorder.take()
		return o.recordAll(ctx, tx, taken)
	})
	finish(taken, err)
	if err != nil && o.recorder.withdraw(d) {
		return 0, recordErr(m, err)
	}
	<-d.done
	if d.err != nil {
		return 0, recordErr(m, d.err)
	}
	return d.lag, nil
}

// recordAll records the deliveries ds in tx, and each one's lag; an effect
// no longer in the table is idemoutbox.ErrGone for its record alone.
func (o *Outbox) recordAll(ctx context.Context, tx *sqlitestore.Tx, ds []*record) error {
	now := o.now().UnixMilli()
	for _, d := range ds {
		var ms int64
		err := tx.QueryRowContext(ctx, deliveredSQL, d.m.ID, d.m.Tenant, d.m.Scope, d.m.Key, d.m.EffectKey, now).Scan(&ms)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			d.err = idemoutbox.ErrGone
		case err != nil:
			return err
		}
		d.lag = time.Duration(ms) * time.Millisecond
	}
	return nil
}
