package memstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestPhaseStorm(t *testing.T) {
	enginetest.PhaseStorm(t, memstore.New(), false, 30, 3)
}

// A phase record outlives the retries sent within the ttl of the
// request's first attempt.
func TestPhaseOutlivesRetries(t *testing.T) {
	enginetest.PhaseOutlivesRetries(t, memstore.New(), false)
}
