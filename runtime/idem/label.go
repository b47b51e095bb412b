package idem

import (
	"crypto/rand"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// keyLabel is how a key appears in logs and events: its keyed label unless
// the operator asked for the keys themselves. Keys can carry customer
// identifiers. With Config.Secrets, k is the stored HMAC, never the key.
func (e *Engine) keyLabel(k string) string {
	if e.logKeys {
		return k
	}
	// A key stored as its HMAC carries its label: the label under the
	// secret its row was written with, which is what finds that row.
	return idemstore.StoredKeyLabel(e.labelSecret, k)
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
