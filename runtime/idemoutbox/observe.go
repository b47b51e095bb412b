package idemoutbox

import (
	"context"
	"time"
)

// Outcome names what happened to a staged effect.
type Outcome string

// The outcomes an Observer sees.
const (
	// OutcomeStaged: a handler staged the effect in its transaction. It
	// is counted when staged, so a request that then rolls back counts
	// too; the delivered, retried and dead counts are of committed ones.
	OutcomeStaged Outcome = "staged"
	// OutcomeDelivered: the receiver accepted it and the delivery was
	// recorded; Lag is the time from its staging.
	OutcomeDelivered Outcome = "delivered"
	// OutcomeRetried: an attempt failed and the effect is due again later.
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: the last attempt failed; the effect is dead.
	OutcomeDead Outcome = "dead"
)

// Event describes one staging or one delivery attempt.
type Event struct {
	// Name is the effect's name, a bounded set fit for a metric label.
	Name    string
	Outcome Outcome
	// Attempt is the delivery attempt, from 1; 0 for OutcomeStaged.
	Attempt int
	// Lag is the time from staging to the recorded delivery
	// (OutcomeDelivered only), by the store's clock.
	Lag time.Duration
	// Err is the receiver's error behind OutcomeRetried and OutcomeDead.
	Err error
}

// Observer sees every staging and delivery attempt, for metrics. It is
// called synchronously; keep it fast.
type Observer interface {
	ObserveEffect(ctx context.Context, ev Event)
}

// Observe reports ev to o when there is one; the runner and the
// dialects' Stage call it.
func Observe(ctx context.Context, o Observer, ev Event) {
	if o != nil {
		o.ObserveEffect(ctx, ev)
	}
}
