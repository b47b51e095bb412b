package outboxtest

import (
	"context"
	"errors"
	"sync"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// receiver is an in-process receiver: it counts what it accepts by
// effect key and refuses every poison effect.
type receiver struct {
	mu       sync.Mutex
	got      map[string]int
	payloads map[string]string
	refused  int
	// hold, when set, is waited for before each delivery is accepted,
	// and entered told of each delivery that waits.
	hold    chan struct{}
	entered chan struct{}
}

func newReceiver() *receiver {
	return &receiver{got: make(map[string]int), payloads: make(map[string]string)}
}

func (r *receiver) deliver(ctx context.Context, m idemoutbox.Message) error {
	if r.hold != nil {
		r.entered <- struct{}{}
		select {
		case <-r.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.Name == poison {
		r.refused++
		return errors.New("the receiver refuses poison")
	}
	r.got[m.EffectKey]++
	r.payloads[m.EffectKey] = string(m.Payload)
	return nil
}

// count returns how often the effect key ek was accepted.
func (r *receiver) count(ek string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[ek]
}

// totals returns the effects accepted (distinct) and the deliveries
// beyond the first of each.
func (r *receiver) totals() (distinct, duplicates int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.got {
		distinct++
		duplicates += n - 1
	}
	return distinct, duplicates
}
