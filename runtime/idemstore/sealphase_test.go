package idemstore_test

import (
	"errors"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

func TestSealedPhaseIsBoundToItsRequestAndName(t *testing.T) {
	s, err := idemstore.NewAESGCM(idemstore.SealKey{ID: "k1", Key: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	id := idemstore.Identity{Tenant: "acme", Scope: "charge", Key: "k1"}
	sealed, err := idemstore.SealPhase(s, id, "charge", []byte("ch_1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := idemstore.OpenPhase(s, id, "charge", sealed); err != nil || string(got) != "ch_1" {
		t.Fatalf("OpenPhase = %q, %v", got, err)
	}
	other := id
	other.Key = "k2"
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	for what, open := range map[string]func() ([]byte, error){
		"another name":    func() ([]byte, error) { return idemstore.OpenPhase(s, id, "refund", sealed) },
		"another request": func() ([]byte, error) { return idemstore.OpenPhase(s, other, "charge", sealed) },
		"changed":         func() ([]byte, error) { return idemstore.OpenPhase(s, id, "charge", tampered) },
		"no sealer":       func() ([]byte, error) { return idemstore.OpenPhase(nil, id, "charge", sealed) },
		"unsealed":        func() ([]byte, error) { return idemstore.OpenPhase(s, id, "charge", []byte("ch_1")) },
	} {
		if _, err := open(); !errors.Is(err, idemstore.ErrUnreadable) {
			t.Errorf("%s: %v, want ErrUnreadable", what, err)
		}
	}
}
