package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// ErrNotProtected is wrapped by the error of EffectKey and Phase when
// their context is not the handler's context of a request the engine
// protects with a key: the engine is not in front of the handler, or the
// request carries no key (an optional key left out), so there is no
// request for an effect to belong to.
var ErrNotProtected = errors.New("idem: not inside a request protected by a key")

// ErrEffectName is wrapped by the error of EffectKey and Phase for a name
// they refuse: empty, longer than MaxEffectName bytes, or holding a byte
// outside EffectNameChars.
var ErrEffectName = errors.New("idem: invalid effect name")

// MaxEffectName is the longest effect or phase name, in bytes.
const MaxEffectName = 64

// EffectNameChars are the bytes an effect or phase name may hold besides
// ASCII letters and digits.
const EffectNameChars = "._-"

// EffectKey returns the key of the named effect of the request ctx belongs
// to (the handler's context, or one derived from it): the key to send a
// downstream that honours idempotency keys (a payment processor's
// Idempotency-Key; idemclient.WithEffectKey sends it), so that however
// often the handler runs for the request, the downstream acts once.
//
// It is the same on every run of the request, in any process, before and
// after a restart or a takeover, and differs between tenants, scopes, keys,
// request fingerprints and names; it is EffectKeyLength hex digits and
// shows none of them. It is derived under Config.EffectSecret, which no
// rotation of Config.Secrets touches, so that no step of a rotation
// changes it (docs/semantics.md §8.1).
//
// The error wraps ErrNotProtected outside a request protected by a key,
// and ErrEffectName for a name it refuses.
func EffectKey(ctx context.Context, name string) (string, error) {
	a, err := protectedFrom(ctx, "EffectKey")
	if err != nil {
		return "", err
	}
	if err := checkEffectName(name); err != nil {
		return "", err
	}
	return a.effectSecret.EffectKey(a.effectAnchor(), name), nil
}

// EffectKeyLength is the length of every effect key.
const EffectKeyLength = idemstore.EffectKeyLength

// protectedFrom returns the mark of the keyed request ctx belongs to, or an
// error wrapping ErrNotProtected that names the caller (what).
func protectedFrom(ctx context.Context, what string) (*applied, error) {
	a := appliedFrom(ctx)
	switch {
	case a == nil:
		return nil, fmt.Errorf("%w: %s needs the handler's context of a request the idempotency engine serves", ErrNotProtected, what)
	case a.anchor.Key == "":
		return nil, fmt.Errorf("%w: %s: the request to operation %s carries no idempotency key", ErrNotProtected, what, a.op.OperationID)
	}
	return a, nil
}

// checkEffectName applies the rules of an effect or phase name.
func checkEffectName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrEffectName)
	case len(name) > MaxEffectName:
		return fmt.Errorf("%w: %q has %d bytes, more than %d", ErrEffectName, name, len(name), MaxEffectName)
	}
	for i := 0; i < len(name); i++ {
		if !effectNameByte(name[i]) {
			return fmt.Errorf("%w: %q holds %q; use letters, digits and %q", ErrEffectName, name, name[i], EffectNameChars)
		}
	}
	return nil
}

func effectNameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == '-'
}

// effectSecret is the secret effect keys are derived and phases named
// under: Config.EffectSecret, or its default (prepareEffectSecret), which
// no rotation of Config.Secrets changes (docs/semantics.md §8.1).
func (e *Engine) effectSecret() *idemstore.Secret { return &e.effect }

// anchorKey is the client's key k as the effect secret stores it; stored
// is k as the newest of Config.Secrets stores it, which it is when the two
// are one.
func (e *Engine) anchorKey(k, stored string) string {
	if e.effectStored {
		return stored
	}
	return e.effect.Key(k)
}

// effectAnchor is the identity a's effect keys are derived and its phases
// recorded under (idemstore.PhaseIdentity), from the request's key and
// fingerprint under the effect secret. It is made when asked for, so that
// requests that make no effect pay nothing for it.
func (a *applied) effectAnchor() idemstore.Identity {
	fp := a.effectSecret.Fingerprint(a.raw)
	return idemstore.PhaseIdentity(a.anchor, a.op.scopeID(), fp[:])
}
