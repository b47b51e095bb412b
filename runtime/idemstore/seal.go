package idemstore

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// Sealer seals stored responses, so that the store does not keep a
// readable copy of what handlers answered (a transfer's memo, a card
// number). NewAESGCM is one; a team can back one with its KMS. Both
// methods are called concurrently.
type Sealer interface {
	// Seal encrypts and authenticates plaintext, binding aad to it, under
	// the sealer's current key, and names that key: keyID is stored beside
	// the ciphertext and given back to Open, so that rotation keeps old
	// rows readable. keyID is 1..255 bytes.
	Seal(plaintext, aad []byte) (keyID string, ciphertext []byte, err error)
	// Open authenticates and decrypts what Seal returned under keyID, with
	// the same aad, and fails when either was changed. An empty keyID asks
	// about a response stored unsealed (before sealing was turned on):
	// a nil error lets it be replayed as stored, an error refuses it.
	Open(keyID string, ciphertext, aad []byte) ([]byte, error)
}

// ErrUnreadable reports a stored response or phase result that cannot be
// opened: changed in the store, moved from another key's row, sealed under
// a key the Sealer no longer has, or sealed when no Sealer is configured.
// The engine answers 500 stored-response-unreadable for a response and
// replays nothing; a phase fails.
var ErrUnreadable = errors.New("idemstore: a stored record cannot be opened")

// sealMagic starts a sealed body: the magic, the length of the sealer's key
// ID (1..255) and the key ID, then the ciphertext. An unsealed body that
// begins with the magic is stored with a key ID of length 0 and
// escapeTag in front of it (escape), so that every stored body reads back
// one way only.
const sealMagic = "\x00idem-sealed\x01"

// escapeTag follows a magic and a key ID length of 0 in an escaped value.
// Releases before the escape stored an unsealed value as given and could
// not read one that began with a magic (they refused it as a malformed
// seal); the tag keeps such a value, which may well go on with a 0, from
// being read as escaped: it reads as unreadable still, as it did, unless
// it goes on with the tag too, which no value carries by accident.
const escapeTag = "\xffidem-unsealed\xff"

// escape is value as the store keeps it unsealed: as it is, or, when it
// begins with magic and would be read as sealed, behind magic, a key ID
// length of 0, which no seal has, and escapeTag.
func escape(magic string, value []byte) []byte {
	if !bytes.HasPrefix(value, []byte(magic)) {
		return value
	}
	out := make([]byte, 0, len(magic)+1+len(escapeTag)+len(value))
	out = append(append(out, magic...), 0)
	out = append(out, escapeTag...)
	return append(out, value...)
}

// unwrap reads a stored value that may begin with magic: the key ID and
// ciphertext of a seal (sealed), or the value stored unsealed, given back
// as value with an escape (escape) taken off; malformed reports a magic
// followed by no key ID length, by a key ID shorter than it says, or by a
// length of 0 without escapeTag.
func unwrap(magic string, stored []byte) (keyID string, value []byte, sealed, malformed bool) {
	rest, ok := bytes.CutPrefix(stored, []byte(magic))
	switch {
	case !ok:
		return "", stored, false, false
	case len(rest) < 1:
		return "", nil, false, true
	case rest[0] == 0:
		value, escaped := bytes.CutPrefix(rest[1:], []byte(escapeTag))
		if !escaped {
			return "", nil, false, true
		}
		return "", value, false, false
	case len(rest) < 1+int(rest[0]):
		return "", nil, false, true
	}
	return string(rest[1 : 1+int(rest[0])]), rest[1+int(rest[0]):], true, false
}

// SealResponse is resp as the store keeps it under s: the status in clear,
// no headers, and a body that holds the sealer's key ID and the sealed
// headers and body. The seal is bound to id (the stored identity) and the
// status, so a row's response cannot be moved to another key or given
// another status. A response whose body was omitted keeps its status only.
//
// With a nil s the response is kept unsealed: as it is, except that a body
// that begins as a sealed one does is escaped, so that OpenResponse gives
// it back rather than take it for a seal.
func SealResponse(s Sealer, id Identity, resp Response) (Response, error) {
	if resp.Omitted {
		return Response{Status: resp.Status, Header: http.Header{}, Omitted: true}, nil
	}
	if s == nil {
		resp.Body = escape(sealMagic, resp.Body)
		return resp, nil
	}
	h := headerwire.Encode(resp.Header)
	plain := make([]byte, 0, binary.MaxVarintLen64+len(h)+len(resp.Body))
	plain = binary.AppendUvarint(plain, uint64(len(h)))
	plain = append(append(plain, h...), resp.Body...)
	keyID, ct, err := s.Seal(plain, sealAAD(id, resp.Status))
	if err != nil {
		return Response{}, fmt.Errorf("idemstore: seal the response: %w", err)
	}
	if len(keyID) == 0 || len(keyID) > 255 {
		return Response{}, fmt.Errorf("idemstore: seal the response: key ID of %d bytes; it must have 1..255", len(keyID))
	}
	body := make([]byte, 0, len(sealMagic)+1+len(keyID)+len(ct))
	body = append(append(body, sealMagic...), byte(len(keyID)))
	body = append(append(body, keyID...), ct...)
	return Response{Status: resp.Status, Header: http.Header{}, Body: body}, nil
}

// OpenResponse gives back the response SealResponse stored for id. With a
// nil s it refuses a sealed response, so that a replica without the sealer
// never replays ciphertext. Errors wrap ErrUnreadable.
func OpenResponse(s Sealer, id Identity, stored Response) (Response, error) {
	if stored.Omitted {
		return stored, nil
	}
	keyID, ct, sealed, malformed := unwrap(sealMagic, stored.Body)
	switch {
	case malformed:
		return Response{}, fmt.Errorf("%w: the stored response has a malformed seal", ErrUnreadable)
	case !sealed && s == nil:
		stored.Body = ct
		return stored, nil
	case !sealed:
		if _, err := s.Open("", nil, sealAAD(id, stored.Status)); err != nil {
			return Response{}, fmt.Errorf("%w: the response was stored unsealed: %w", ErrUnreadable, err)
		}
		stored.Body = ct
		return stored, nil
	case s == nil:
		return Response{}, fmt.Errorf("%w: the stored response is sealed and no Sealer is configured", ErrUnreadable)
	}
	plain, err := s.Open(keyID, ct, sealAAD(id, stored.Status))
	if err != nil {
		return Response{}, fmt.Errorf("%w: the stored response, key %q: %w", ErrUnreadable, keyID, err)
	}
	n, w := binary.Uvarint(plain)
	if w <= 0 || uint64(len(plain)-w) < n {
		return Response{}, fmt.Errorf("%w: malformed sealed response", ErrUnreadable)
	}
	h, err := headerwire.Decode(plain[w : w+int(n)])
	if err != nil {
		return Response{}, fmt.Errorf("%w: the stored response's headers: %w", ErrUnreadable, err)
	}
	if h == nil {
		h = http.Header{}
	}
	return Response{Status: stored.Status, Header: h, Body: plain[w+int(n):]}, nil
}

// sealAAD binds a seal to its row: the stored identity (length-prefixed,
// so that no two identities share an encoding) and the status.
func sealAAD(id Identity, status int) []byte {
	b := make([]byte, 0, 32+len(id.Tenant)+len(id.Scope)+len(id.Key))
	b = append(b, "idemgen seal v1"...)
	for _, s := range [...]string{id.Tenant, id.Scope, id.Key} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint32(b, uint32(status))
}

// SealKey is one AES-256 key of an AESGCM sealer.
type SealKey struct {
	// ID names the key in every row sealed with it: 1..255 bytes, never
	// reused for other key material.
	ID string
	// Key is 32 random bytes.
	Key []byte
}

// AESGCM seals with AES-256-GCM and a random 96-bit nonce per response,
// under the newest of its keys.
type AESGCM struct {
	current string
	aeads   map[string]cipher.AEAD
	// unsealed is set when responses stored before sealing are accepted.
	unsealed bool
}

// NewAESGCM returns a sealer over keys, newest first: it seals with
// keys[0] and opens with any of them, so a rotated-out key stays in the
// list until the longest ttl has passed since it last sealed. An entry
// with neither ID nor Key (after the first) accepts responses stored
// before sealing was turned on, for the same transition.
func NewAESGCM(keys ...SealKey) (*AESGCM, error) {
	if len(keys) == 0 || keys[0].ID == "" {
		return nil, errors.New("idemstore: NewAESGCM needs a current key with an ID")
	}
	a := &AESGCM{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if k.ID == "" && len(k.Key) == 0 {
			a.unsealed = true
			continue
		}
		if len(k.ID) > 255 || k.ID == "" {
			return nil, fmt.Errorf("idemstore: seal key %d: the ID must have 1..255 bytes", i)
		}
		if _, dup := a.aeads[k.ID]; dup {
			return nil, fmt.Errorf("idemstore: seal key ID %q appears twice", k.ID)
		}
		if len(k.Key) != 32 {
			return nil, fmt.Errorf("idemstore: seal key %q has %d bytes; AES-256 needs 32", k.ID, len(k.Key))
		}
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("idemstore: seal key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("idemstore: seal key %q: %w", k.ID, err)
		}
		a.aeads[k.ID] = aead
	}
	return a, nil
}

// Seal implements Sealer: the ciphertext is the nonce followed by GCM's
// output.
func (a *AESGCM) Seal(plaintext, aad []byte) (string, []byte, error) {
	aead := a.aeads[a.current]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", nil, fmt.Errorf("idemstore: seal nonce: %w", err)
	}
	return a.current, aead.Seal(out, out, plaintext, aad), nil
}

// Open implements Sealer.
func (a *AESGCM) Open(keyID string, ciphertext, aad []byte) ([]byte, error) {
	if keyID == "" {
		if a.unsealed {
			return nil, nil
		}
		return nil, errors.New("idemstore: responses stored unsealed are not accepted (no empty SealKey in the list)")
	}
	aead, ok := a.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("idemstore: no seal key %q", keyID)
	}
	if len(ciphertext) < aead.NonceSize() {
		return nil, errors.New("idemstore: sealed response too short")
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, ciphertext[:n], ciphertext[n:], aad)
	if err != nil {
		return nil, fmt.Errorf("idemstore: open sealed response: %w", err)
	}
	return plain, nil
}

// IsSealed reports whether stored holds a response SealResponse sealed,
// or one that claims to be and cannot be opened; not one it kept unsealed.
func IsSealed(stored Response) bool {
	_, _, sealed, malformed := unwrap(sealMagic, stored.Body)
	return sealed || malformed
}
