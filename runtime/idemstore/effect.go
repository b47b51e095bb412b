package idemstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// effectDomain starts the message whose MAC is an effect key. Keys never
// hold a NUL, so no stored key, fingerprint or label can equal an effect
// key derived under the same secret.
const effectDomain = "\x00idemgen effect\x00"

// EffectKeyLength is the length of every effect key: 40 lowercase hex
// digits (160 bits), within the shortest limit processors put on the keys
// they take (Adyen's 64, Square's 45), in an alphabet every one accepts.
const EffectKeyLength = 40

// EffectKey is the key of the effect named name of the request stored
// under id, derived under s, the secret id.Key is stored under
// (docs/semantics.md §8.1): HMAC-SHA256 over the tenant, scope, stored key
// and name, each prefixed by its length so that no two of them can run
// into each other, cut to EffectKeyLength hex digits. Under the empty
// secret (keys stored in clear) it is the same message's SHA-256: it
// still shows none of its parts, but a downstream could test guesses of a
// short key against it.
func (s *Secret) EffectKey(id Identity, name string) string {
	msg := make([]byte, 0, len(effectDomain)+len(id.Tenant)+len(id.Scope)+len(id.Key)+len(name)+4*binary.MaxVarintLen64)
	msg = append(msg, effectDomain...)
	for _, part := range [...]string{id.Tenant, id.Scope, id.Key, name} {
		msg = binary.AppendUvarint(msg, uint64(len(part)))
		msg = append(msg, part...)
	}
	var sum [sha256.Size]byte
	if s.clear {
		sum = sha256.Sum256(msg)
	} else {
		sum = s.mac("", msg)
	}
	return hex.EncodeToString(sum[:EffectKeyLength/2])
}
