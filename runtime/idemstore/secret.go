package idemstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"

	"github.com/idemgen/idemgen/runtime/key"
)

// storedKeyPrefix starts a key stored as its HMAC. A key a client sends
// never holds a space (docs/semantics.md §2), so a stored
// HMAC can neither be mistaken for a key stored in clear nor collide with
// one, while a deployment moves from one to the other.
const storedKeyPrefix = "hmac "

// fingerprintDomain starts the message whose HMAC is a stored fingerprint.
// Keys never hold a NUL, so one secret can key both without a key's HMAC
// ever equalling a fingerprint's.
const fingerprintDomain = "\x00idemgen fingerprint\x00"

// inlineMessage bounds the messages MACed on the stack; header and query
// keys are at most key.MaxLength bytes, so only a body key with multi-byte
// characters, or the operator tools handed a longer string, go past it (and
// take crypto/hmac's allocating path).
const inlineMessage = key.MaxLength + 1

// Secret is one secret that keeps keys and fingerprints out of the store
// as HMACs (idem.Config.Secrets), ready to key HMAC-SHA256 without
// allocating: the padded key blocks are computed once, and each MAC is two
// SHA-256 sums over stack buffers. The empty secret stands for rows
// written before secrets were configured: their keys and fingerprints are
// stored as they are.
type Secret struct {
	clear        bool
	secret       []byte
	inner, outer [sha256.BlockSize]byte
}

// NewSecret prepares secret; an empty one stores keys and fingerprints in
// clear.
func NewSecret(secret []byte) Secret {
	s := Secret{clear: len(secret) == 0, secret: append([]byte(nil), secret...)}
	k := secret
	if len(k) > sha256.BlockSize {
		// RFC 2104: a key longer than a block is hashed first.
		sum := sha256.Sum256(k)
		k = sum[:]
	}
	copy(s.inner[:], k)
	copy(s.outer[:], k)
	for i := range s.inner {
		s.inner[i] ^= 0x36
		s.outer[i] ^= 0x5c
	}
	return s
}

// mac is HMAC-SHA256 under s of a followed by b, computed inline (no
// allocation) when the message fits inlineMessage bytes and by crypto/hmac
// otherwise.
func (s *Secret) mac(a string, b []byte) [sha256.Size]byte {
	if len(a)+len(b) > inlineMessage {
		m := hmac.New(sha256.New, s.secret)
		_, _ = io.WriteString(m, a)
		_, _ = m.Write(append([]byte(nil), b...))
		var out [sha256.Size]byte
		m.Sum(out[:0])
		return out
	}
	var buf [sha256.BlockSize + inlineMessage]byte
	copy(buf[:], s.inner[:])
	n := copy(buf[sha256.BlockSize:], a)
	n += copy(buf[sha256.BlockSize+n:], b)
	in := sha256.Sum256(buf[:sha256.BlockSize+n])
	var out [sha256.BlockSize + sha256.Size]byte
	copy(out[:], s.outer[:])
	copy(out[sha256.BlockSize:], in[:])
	return sha256.Sum256(out[:])
}

// Key is the client's key k as the store keeps it under s (StoredKey).
func (s *Secret) Key(k string) string {
	if s.clear {
		return k
	}
	sum := s.mac(k, nil)
	var buf [len(storedKeyPrefix) + 2*sha256.Size]byte
	copy(buf[:], storedKeyPrefix)
	hex.Encode(buf[len(storedKeyPrefix):], sum[:])
	return string(buf[:])
}

// Fingerprint is a request's fingerprint as the store keeps it under s
// (StoredFingerprint): an HMAC of the canonical form's SHA-256, so that a
// reader of the row cannot test guesses of the fingerprinted fields (an
// amount) against it.
func (s *Secret) Fingerprint(sum [sha256.Size]byte) [sha256.Size]byte {
	if s.clear {
		return sum
	}
	return s.mac(fingerprintDomain, sum[:])
}

// StoredKey is k as a store keeps it under secret: "hmac " and the 64
// hex digits of HMAC-SHA256(secret, k), or k itself when secret is
// empty. The operator tools use it to find a key a client names; the first
// 20 hex digits are the key's label under the same secret (KeyLabel).
func StoredKey(secret []byte, k string) string {
	s := NewSecret(secret)
	return s.Key(k)
}

// IsStoredHMAC reports whether a stored key is the HMAC of a client's key
// rather than the key itself.
func IsStoredHMAC(stored string) bool { return strings.HasPrefix(stored, storedKeyPrefix) }

// StoredKeyLabel is the label of a stored key: for a stored HMAC it is read
// off the HMAC (the label under the secret the row was written with), so
// that no secret is needed; for a key stored in clear it is KeyLabel under
// secret.
func StoredKeyLabel(secret []byte, stored string) string {
	if IsStoredHMAC(stored) && len(stored) >= len(storedKeyPrefix)+2*labelBytes {
		return labelPrefix + stored[len(storedKeyPrefix):len(storedKeyPrefix)+2*labelBytes]
	}
	return KeyLabel(secret, stored)
}

// StoredFingerprint is a request's fingerprint (the SHA-256 of its
// canonical form) as a store keeps it under secret, or sum itself when
// secret is empty.
func StoredFingerprint(secret []byte, sum [sha256.Size]byte) [sha256.Size]byte {
	s := NewSecret(secret)
	return s.Fingerprint(sum)
}

// labelPrefix marks a keyed key label, so that a reader can tell it from a
// key logged in clear (idem.Config.LogKeys).
const labelPrefix = "hmac:"

// labelBytes is how much of the HMAC a label keeps: 80 bits, far more than
// enough to name one row among billions, short enough to read in a log.
const labelBytes = 10

// KeyLabel is how a key appears in the engine's logs, in observer events
// and in `idemgen keys`: a truncated HMAC-SHA256 of the key under secret,
// "hmac:" and 20 hex digits. Without the secret a log reader cannot test
// guesses against a label, so short or sequential keys (order numbers,
// customer ids) do not fall out of it; with the same secret an operator
// finds the row a log line speaks of.
func KeyLabel(secret []byte, k string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(k))
	return labelPrefix + hex.EncodeToString(m.Sum(nil)[:labelBytes])
}
