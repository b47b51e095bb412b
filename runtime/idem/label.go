package idem

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// labelPrefix marks a keyed key label, so that a reader can tell it from a
// key logged in clear (Config.LogKeys).
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
func KeyLabel(secret []byte, key string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	return labelPrefix + hex.EncodeToString(m.Sum(nil)[:labelBytes])
}

// keyLabel is how a key appears in logs and events: its keyed label unless
// the operator asked for the keys themselves. Keys can carry customer
// identifiers. With Config.Secrets, k is the stored HMAC, never the key.
func (e *Engine) keyLabel(k string) string {
	if e.logKeys {
		return k
	}
	// A key stored as its HMAC carries its label: the label under the
	// secret its row was written with, which is what finds that row.
	return StoredKeyLabel(e.labelSecret, k)
}

// labelSecret returns the configured secret, or a random one when none is
// set: labels stay keyed (never a plain hash a reader could invert), but
// they match only within this engine's lifetime.
func labelSecret(configured []byte) (secret []byte, random bool) {
	if len(configured) > 0 {
		return append([]byte(nil), configured...), false
	}
	secret = make([]byte, 32)
	_, _ = rand.Read(secret)
	return secret, true
}
