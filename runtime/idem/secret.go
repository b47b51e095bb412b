package idem

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// storedKeyPrefix starts a key stored as its HMAC. A key a client sends is
// visible ASCII only (SEMANTICS §2) and never holds a space, so a stored
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

// inlineMessage bounds the messages MACed on the stack; keys are at most
// 255 bytes, so only the operator tools, handed a longer string, go past it.
const inlineMessage = 256

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
func (s *storeSecret) storedKey(key string) string {
	if s.clear {
		return key
	}
	sum := s.mac(key, nil)
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

// protect rewrites c's key and fingerprint as the store keeps them under
// the newest secret, and returns the claims the same request would have
// made under each older secret still within op's window (rows written
// under them may live until SecretsRotatedAt + ttl + lease). Without
// secrets c is returned as it is and there are no older claims.
func (e *Engine) protect(op *operation, c Claim, sum *[sha256.Size]byte) (Claim, []Claim) {
	if len(e.secrets) == 0 {
		return c, nil
	}
	raw, key := *sum, c.Key
	*sum = e.secrets[0].fingerprint(raw)
	c.Key = e.secrets[0].storedKey(key)
	if len(e.secrets) == 1 || (!e.rotatedAt.IsZero() && time.Since(e.rotatedAt) > op.TTL+op.Lease) {
		return c, nil
	}
	older := make([]Claim, 0, len(e.secrets)-1)
	for i := range e.secrets[1:] {
		s := &e.secrets[i+1]
		o := c
		o.Key = s.storedKey(key)
		fp := s.fingerprint(raw)
		o.Fingerprint = fp[:]
		older = append(older, o)
	}
	return c, older
}

// metUnderOlder looks, after own's claim was won, for a row of the same
// request written under an older secret (Config.Secrets), by claiming the
// key under each one in turn. A claim that wins found nothing and is
// released at once; one that loses met the row that stands, which answers
// the request instead, and own's claim is released. Own's claim is held
// throughout, so a replica still writing under the older secret either
// meets it or is met: never do both run the handler. It reports whether
// the request was answered.
func (e *Engine) metUnderOlder(w http.ResponseWriter, r *http.Request, q *request, own plainHold) bool {
	for _, c := range q.older {
		ctx, cancel := e.storeContext(r)
		res, err := e.timed(q, func() (Result, error) { return e.store.Claim(ctx, c) })
		switch {
		case err != nil:
			err = errors.Join(err, e.releaseProbe(ctx, q, c), own.release(ctx))
			cancel()
			e.storeUnavailable(w, r, q, "claim under an older secret", err)
			return true
		case res.Won:
			_ = e.releaseProbe(ctx, q, c)
			cancel()
		default:
			err := own.release(ctx)
			cancel()
			if err != nil {
				e.log.WarnContext(r.Context(), "idempotency claim not released; it stays until its lease ends",
					"operation", q.op.OperationID, "key", e.keyLabel(q.key), "err", err)
			}
			q.id, q.key = c.Identity, c.Key
			e.answerExisting(w, r, q, c, res.Existing)
			return true
		}
	}
	return false
}

// holdOlder claims the key under each older secret before a transactional
// claim and holds what it wins until the request ends (releaseOlder): a
// claim under an older secret made after the handler's transaction began
// could wait on that transaction's own lock (SQLite has one writer). A
// claim that loses met the row that answers the request; it reports
// whether the request was answered.
func (e *Engine) holdOlder(w http.ResponseWriter, r *http.Request, q *request) (held []Claim, answered bool) {
	for _, c := range q.older {
		res, err := e.timed(q, func() (Result, error) {
			ctx, cancel := e.storeContext(r)
			defer cancel()
			return e.store.Claim(ctx, c)
		})
		switch {
		case err != nil:
			held = append(held, c) // the claim may have been written
			e.storeUnavailable(w, r, q, "claim under an older secret", err)
			return held, true
		case !res.Won:
			q.id, q.key = c.Identity, c.Key
			e.answerExisting(w, r, q, c, res.Existing)
			return held, true
		}
		held = append(held, c)
	}
	return held, false
}

// releaseOlder releases the claims holdOlder won.
func (e *Engine) releaseOlder(r *http.Request, q *request, held []Claim) {
	if len(held) == 0 {
		return
	}
	ctx, cancel := e.storeContext(r)
	defer cancel()
	for _, c := range held {
		_ = e.releaseProbe(ctx, q, c)
	}
}

// releaseProbe releases a claim made under an older secret. One that stays
// (the store failed) is in flight under the request's token until its
// lease ends, and is then judged like any abandoned claim.
func (e *Engine) releaseProbe(ctx context.Context, q *request, c Claim) error {
	err := e.store.Release(ctx, c.Identity, c.Token)
	if err != nil && !errors.Is(err, ErrFenced) {
		e.log.WarnContext(ctx, "a claim under an older secret could not be released; it stays until its lease ends",
			"operation", q.op.OperationID, "key", e.keyLabel(c.Key), "err", err)
		return err
	}
	return nil
}

// StoredFingerprint is a request's fingerprint (the SHA-256 of its
// canonical form) as a store keeps it under secret, or sum itself when
// secret is empty.
func StoredFingerprint(secret []byte, sum [sha256.Size]byte) [sha256.Size]byte {
	s := newStoreSecret(secret)
	return s.fingerprint(sum)
}
