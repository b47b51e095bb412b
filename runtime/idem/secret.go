package idem

import (
	"crypto/hmac"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

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

// prepareSecrets checks Config.Secrets and returns them ready for use.
func prepareSecrets(cfg Config) ([]idemstore.Secret, error) {
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
	out := make([]idemstore.Secret, 0, len(cfg.Secrets))
	clear := false
	for i, s := range cfg.Secrets {
		if len(s) == 0 && clear {
			return nil, fmt.Errorf("idem: Config.Secrets[%d]: only one empty entry (rows stored before secrets) is meaningful", i)
		}
		if err := checkSecretLength(fmt.Sprintf("Config.Secrets[%d]", i), s); err != nil {
			return nil, err
		}
		clear = clear || len(s) == 0
		out = append(out, idemstore.NewSecret(s))
	}
	return out, nil
}
