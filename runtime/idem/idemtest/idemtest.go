// Package idemtest builds the policies that tests of code on the engine
// share, so that a test spells only what it is about. It is for the
// engine's own tests, the stores' and adapters' tests, and the tests of
// services mounted on the engine.
package idemtest

import (
	"net/http"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
)

// Policy returns a POST policy for operation id on path: scoped to the
// operation, with a required Idempotency-Key header of at most
// key.MaxLength, the whole body fingerprinted, a TTL of 24 hours, a
// one-minute lease that fails closed, and snapshots of up to 1 KiB. Each
// of adjust then changes what its test is about.
func Policy(id, path string, adjust ...func(*idem.Policy)) idem.Policy {
	p := idem.Policy{
		OperationID:      id,
		Method:           http.MethodPost,
		Path:             path,
		Scope:            idem.ScopeOperation,
		Key:              idem.KeySource{In: key.InHeader, Name: "Idempotency-Key"},
		KeyMaxLength:     key.MaxLength,
		Required:         true,
		TTL:              24 * time.Hour,
		Lease:            time.Minute,
		MaxSnapshotBytes: 1 << 10,
		OnLeaseExpiry:    idemstore.FailClosed,
	}
	for _, f := range adjust {
		f(&p)
	}
	return p
}
