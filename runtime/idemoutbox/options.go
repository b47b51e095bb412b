package idemoutbox

import (
	"context"
	"fmt"
	"reflect"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Options configure a dialect's outbox.
type Options struct {
	// MaxPayload is the largest payload Stage accepts, in bytes; 0 means
	// DefaultMaxPayload.
	MaxPayload int
	// Observer sees each effect staged.
	Observer Observer
}

// Stage is the staging every dialect shares (docs/semantics.md §8.3): it
// checks the effect (Prepare) before it touches the transaction, then
// finds the request's transaction as the dialect's driver type Tx and
// writes the row with insert, which reports false when a pending effect
// has the effect key. Written in the key's transaction
// (docs/semantics.md §5), the row commits with the request's writes or
// not at all.
func Stage[Tx any](ctx context.Context, o Options, name string, payload []byte, insert func(Tx, Staged) (bool, error)) error {
	limit := o.MaxPayload
	if limit == 0 {
		limit = DefaultMaxPayload
	}
	s, err := Prepare(ctx, name, payload, limit)
	if err != nil {
		return err
	}
	tx, ok := idem.TxFrom[Tx](ctx)
	if !ok {
		return fmt.Errorf("%w: effect %q: the operation is not transactional, or its store's transaction is not a %s", ErrNotTransactional, name, reflect.TypeFor[Tx]())
	}
	inserted, err := insert(tx, s)
	switch {
	case err != nil:
		return fmt.Errorf("idemoutbox: stage effect %q: %w", name, err)
	case !inserted:
		return fmt.Errorf("%w: effect %q of this request", ErrStagedTwice, name)
	}
	Observe(ctx, o.Observer, Event{Name: name, Outcome: OutcomeStaged})
	return nil
}
