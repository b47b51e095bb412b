package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// Transactional: a run that dies rolls its claim back with its
// transaction, and its phases, recorded beside it, stand.
func TestPhaseStorm(t *testing.T) {
	testURL(t)
	enginetest.PhaseStorm(t, pgstore.New(openPool(t, newSchema(t))), true, 30, 3)
}

// A phase record outlives the retries sent within the ttl of the
// request's first attempt.
func TestPhaseOutlivesRetries(t *testing.T) {
	testURL(t)
	enginetest.PhaseOutlivesRetries(t, pgstore.New(openPool(t, newSchema(t))), true)
}
