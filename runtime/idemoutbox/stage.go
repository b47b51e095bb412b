package idemoutbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// DefaultMaxPayload is the payload limit of an outbox made without one:
// an effect is a message, not a file.
const DefaultMaxPayload = 64 << 10

// Staged is an effect checked and ready to be written in its request's
// transaction.
type Staged struct {
	Tenant, Scope, Key string
	EffectKey          string
	Name               string
	Payload            []byte
}

// Prepare checks the effect name with payload that a handler stages under
// ctx and returns the row to write. The dialects call it before they touch
// the request's transaction. It refuses, before anything is written: a
// payload over maxPayload bytes (ErrTooLarge); a context that is not a
// handler's the engine protects with a key (ErrNotTransactional, wrapping
// idem.ErrNotProtected), where no effect key exists; a name EffectKey
// refuses (idem.ErrEffectName).
func Prepare(ctx context.Context, name string, payload []byte, maxPayload int) (Staged, error) {
	if len(payload) > maxPayload {
		return Staged{}, fmt.Errorf("%w: effect %q is %d bytes, the limit is %d", ErrTooLarge, name, len(payload), maxPayload)
	}
	ek, err := idem.EffectKey(ctx, name)
	switch {
	case errors.Is(err, idem.ErrNotProtected):
		return Staged{}, fmt.Errorf("%w: %w", ErrNotTransactional, err)
	case err != nil:
		return Staged{}, fmt.Errorf("idemoutbox: %w", err)
	}
	id, ok := idem.RequestIdentity(ctx)
	if !ok {
		return Staged{}, fmt.Errorf("%w: effect %q: the request has no key", ErrNotTransactional, name)
	}
	return Staged{Tenant: id.Tenant, Scope: id.Scope, Key: id.Key, EffectKey: ek, Name: name, Payload: payload}, nil
}
