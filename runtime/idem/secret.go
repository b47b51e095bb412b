package idem

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// minSecretBytes is the shortest secret accepted, for the store
// (Config.Secrets) and the log labels (Config.KeyLabelSecret) alike: a
// shorter one could be found by trying candidates against a stored row or
// a logged label.
const minSecretBytes = 16

// checkSecretLength applies the one length rule of every secret the engine
// is given: empty where the field allows it, else at least minSecretBytes.
func checkSecretLength(field string, s []byte) error {
	if len(s) > 0 && len(s) < minSecretBytes {
		return fmt.Errorf("idem: %s has %d bytes; a secret needs at least %d random bytes", field, len(s), minSecretBytes)
	}
	return nil
}

// inlineMessage bounds the messages MACed on the stack; header and query
// keys are at most key.MaxLength bytes, so only a body key with multi-byte
// characters, or the operator tools handed a longer string, go past it (and
// take crypto/hmac's allocating path).
const inlineMessage = key.MaxLength + 1

// storeSecret is one of Config.Secrets, ready to key HMAC-SHA256 without
// allocating: the padded key blocks are computed once, and each MAC is two
// SHA-256 sums over stack buffers.
type storeSecret struct {
	// clear stands for rows written before secrets were configured: their
	// keys and fingerprints are stored as they are.
	clear        bool
	key          []byte
	inner, outer [sha256.BlockSize]byte
}

func newStoreSecret(secret []byte) storeSecret {
	s := storeSecret{clear: len(secret) == 0, key: append([]byte(nil), secret...)}
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
func (s *storeSecret) mac(a string, b []byte) [sha256.Size]byte {
	if len(a)+len(b) > inlineMessage {
		m := hmac.New(sha256.New, s.key)
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

// storedKey is the key as the store keeps it under s.
func (s *storeSecret) storedKey(k string) string {
	if s.clear {
		return k
	}
	sum := s.mac(k, nil)
	var buf [len(storedKeyPrefix) + 2*sha256.Size]byte
	copy(buf[:], storedKeyPrefix)
	hex.Encode(buf[len(storedKeyPrefix):], sum[:])
	return string(buf[:])
}

// fingerprint is the fingerprint as the store keeps it under s: an HMAC of
// the canonical form's SHA-256, so that a reader of the row cannot test
// guesses of the fingerprinted fields (an amount) against it.
func (s *storeSecret) fingerprint(sum [sha256.Size]byte) [sha256.Size]byte {
	if s.clear {
		return sum
	}
	return s.mac(fingerprintDomain, sum[:])
}

// StoredKey is key as a store keeps it under secret: "hmac " and the 64
// hex digits of HMAC-SHA256(secret, key), or key itself when secret is
// empty. The operator tools use it to find a key a client names; the first
// 20 hex digits are the key's label under the same secret (KeyLabel).
func StoredKey(secret []byte, key string) string {
	s := newStoreSecret(secret)
	return s.storedKey(key)
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

// prepareSecrets checks Config.Secrets and returns them ready for use.
func prepareSecrets(cfg Config) ([]storeSecret, error) {
	if len(cfg.Secrets) == 0 {
		return nil, nil
	}
	if len(cfg.Secrets[0]) == 0 {
		return nil, errors.New("idem: Config.Secrets[0] is empty; the newest secret writes every new row and must be set")
	}
	if cfg.LogKeys {
		return nil, errors.New("idem: Config.LogKeys would log the keys that Config.Secrets keep out of the store; use key labels")
	}
	if len(cfg.KeyLabelSecret) > 0 && !hmac.Equal(cfg.KeyLabelSecret, cfg.Secrets[0]) {
		return nil, errors.New("idem: Config.Secrets[0] also keys the log labels; leave Config.KeyLabelSecret empty or equal to it")
	}
	out := make([]storeSecret, 0, len(cfg.Secrets))
	clear := false
	for i, s := range cfg.Secrets {
		if len(s) == 0 && clear {
			return nil, fmt.Errorf("idem: Config.Secrets[%d]: only one empty entry (rows stored before secrets) is meaningful", i)
		}
		if err := checkSecretLength(fmt.Sprintf("Config.Secrets[%d]", i), s); err != nil {
			return nil, err
		}
		clear = clear || len(s) == 0
		out = append(out, newStoreSecret(s))
	}
	return out, nil
}

// protect rewrites c's key and fingerprint (sum, rewritten in place) as
// the store keeps them under the newest secret, and returns the claims the
// same request would have made under older secrets (olderClaims). Without
// secrets c is returned as it is and there are no older claims.
func (e *Engine) protect(op *operation, c Claim, sum *[sha256.Size]byte) (Claim, []Claim) {
	if len(e.secrets) == 0 {
		return c, nil
	}
	raw, k := *sum, c.Key
	*sum = e.secrets[0].fingerprint(raw)
	c.Key = e.secrets[0].storedKey(k)
	return c, e.olderClaims(op, c, k, raw)
}

// StoredFingerprint is a request's fingerprint (the SHA-256 of its
// canonical form) as a store keeps it under secret, or sum itself when
// secret is empty.
func StoredFingerprint(secret []byte, sum [sha256.Size]byte) [sha256.Size]byte {
	s := newStoreSecret(secret)
	return s.fingerprint(sum)
}
