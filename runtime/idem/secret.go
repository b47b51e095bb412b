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

// prepareEffectSecret returns the secret effect keys are derived and
// phases named under (Config.EffectSecret, or its default) and whether it
// is the one new rows are stored under, Secrets[0] or none. It refuses to
// guess one for a list being rotated: the entries move through a rotation
// (docs/runtime.md), so no position in the list names the same secret at
// every step of it, and a guess that changed would call a request's
// downstreams again under another key.
func prepareEffectSecret(cfg Config) (idemstore.Secret, bool, error) {
	set := len(cfg.EffectSecret) > 0
	switch {
	case set && cfg.UnkeyedEffectKeys:
		return idemstore.Secret{}, false, errors.New("idem: Config.EffectSecret and Config.UnkeyedEffectKeys are both set; effect keys are derived under one secret or under none")
	case cfg.UnkeyedEffectKeys:
		return idemstore.NewSecret(nil), len(cfg.Secrets) == 0, nil
	case set:
		if err := checkSecretLength("Config.EffectSecret", cfg.EffectSecret); err != nil {
			return idemstore.Secret{}, false, err
		}
		return idemstore.NewSecret(cfg.EffectSecret), len(cfg.Secrets) > 0 && hmac.Equal(cfg.EffectSecret, cfg.Secrets[0]), nil
	case len(cfg.Secrets) == 0:
		return idemstore.NewSecret(nil), true, nil
	case len(cfg.Secrets) > 1 || !cfg.SecretsRotatedAt.IsZero():
		return idemstore.Secret{}, false, errors.New("idem: Config.Secrets lists more than one entry or SecretsRotatedAt is set, a rotation, and Config.EffectSecret is unset: " +
			"set it to the secret effect keys were derived under before the rotation (the one listed alone before it; earlier releases took the list's last entry), " +
			"or set Config.UnkeyedEffectKeys if there was none, so that no effect key changes")
	}
	return idemstore.NewSecret(cfg.Secrets[0]), true, nil
}
