package idemstore

import (
	"encoding/binary"
	"fmt"
)

// phaseSealMagic starts a sealed phase result, laid out as a sealed body
// is (sealMagic), and escapes an unsealed one that begins with it.
const phaseSealMagic = "\x00idem-sealed-phase\x01"

// SealPhase is a phase's result as the store keeps it under s: the
// sealer's key ID and the sealed result, bound to the phase's identity and
// name, so that a record cannot be moved to another request or phase.
// With a nil s the result is kept unsealed: as it is, except that one that
// begins as a sealed one does is escaped, so that OpenPhase gives it back
// rather than take it for a seal.
func SealPhase(s Sealer, id Identity, name string, result []byte) ([]byte, error) {
	if s == nil {
		return escape(phaseSealMagic, result), nil
	}
	keyID, ct, err := s.Seal(result, phaseAAD(id, name))
	if err != nil {
		return nil, fmt.Errorf("idemstore: seal the phase's result: %w", err)
	}
	if len(keyID) == 0 || len(keyID) > 255 {
		return nil, fmt.Errorf("idemstore: seal the phase's result: key ID of %d bytes; it must have 1..255", len(keyID))
	}
	out := make([]byte, 0, len(phaseSealMagic)+1+len(keyID)+len(ct))
	out = append(append(out, phaseSealMagic...), byte(len(keyID)))
	return append(append(out, keyID...), ct...), nil
}

// OpenPhase gives back the result SealPhase stored for phase name of id.
// With a nil s it refuses a sealed result; with a Sealer it asks it about a
// result recorded unsealed, as OpenResponse does. Errors wrap
// ErrUnreadable.
func OpenPhase(s Sealer, id Identity, name string, stored []byte) ([]byte, error) {
	keyID, ct, sealed, malformed := unwrap(phaseSealMagic, stored)
	switch {
	case malformed:
		return nil, fmt.Errorf("%w: the result of phase %q has a malformed seal", ErrUnreadable, name)
	case !sealed && s == nil:
		return ct, nil
	case !sealed:
		if _, err := s.Open("", nil, phaseAAD(id, name)); err != nil {
			return nil, fmt.Errorf("%w: the result of phase %q was recorded unsealed: %w", ErrUnreadable, name, err)
		}
		return ct, nil
	case s == nil:
		return nil, fmt.Errorf("%w: the result of phase %q is sealed and no Sealer is configured", ErrUnreadable, name)
	}
	plain, err := s.Open(keyID, ct, phaseAAD(id, name))
	if err != nil {
		return nil, fmt.Errorf("%w: the result of phase %q, key %q: %w", ErrUnreadable, name, keyID, err)
	}
	return plain, nil
}

// phaseAAD binds a sealed phase to its identity and name, each
// length-prefixed.
func phaseAAD(id Identity, name string) []byte {
	b := make([]byte, 0, 32+len(id.Tenant)+len(id.Scope)+len(id.Key)+len(name))
	b = append(b, "idemgen phase seal v1"...)
	for _, s := range [...]string{id.Tenant, id.Scope, id.Key, name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}
