package idem

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Effect is one effect an operation's handler makes outside the database,
// as x-idempotency.effects declares it, with what its downstream promises
// about the keys it is sent. The generator checks the promises against
// the policy (the client's retry budget, the effect key's length); New
// checks that the store can hold a recovery point the effect asks for.
type Effect struct {
	// Name is the effect's name, as EffectKey and Phase take it.
	Name string
	// KeyRetention is how long the downstream keeps a key it was sent;
	// zero when not declared.
	KeyRetention time.Duration
	// MaxKeyLength is the longest key the downstream takes; zero when not
	// declared.
	MaxKeyLength int
	// RecoveryPoint says the handler runs the effect in a Phase, so the
	// store must keep phases for the operation.
	RecoveryPoint bool
}

// checkEffects refuses declared effects the engine could not serve: a bad
// or repeated name, a downstream too short for an effect key, and a
// recovery point on a store that cannot record the operation's phases.
func (e *Engine) checkEffects(p Policy) error {
	seen := make(map[string]bool, len(p.Effects))
	for _, ef := range p.Effects {
		if err := checkEffectName(ef.Name); err != nil {
			return fmt.Errorf("effect: %w", err)
		}
		if seen[ef.Name] {
			return fmt.Errorf("effect %q is declared twice", ef.Name)
		}
		seen[ef.Name] = true
		if ef.MaxKeyLength > 0 && ef.MaxKeyLength < EffectKeyLength {
			return fmt.Errorf("effect %q: its downstream takes keys of at most %d characters, and an effect key has %d", ef.Name, ef.MaxKeyLength, EffectKeyLength)
		}
		if !ef.RecoveryPoint {
			continue
		}
		ps, ok := e.store.(idemstore.PhaseStore)
		switch {
		case !ok:
			return fmt.Errorf("effect %q is a recovery point, and the store %T keeps no phases (idemstore.PhaseStore)", ef.Name, e.store)
		case p.Transactional && !ps.PhasesBesideTx():
			return fmt.Errorf("effect %q is a recovery point of a transactional operation, and the store %T cannot record a phase while the request's transaction holds its write lock; make the operation non-transactional or use a store that can (pgstore)", ef.Name, e.store)
		}
	}
	return nil
}
