package redisstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestPhaseStorm(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		enginetest.PhaseStorm(t, target(b.open(t)).Open(t, nil).Store, false, 30, 3)
	})
}

// A phase record outlives the retries sent within the ttl of the
// request's first attempt.
func TestPhaseOutlivesRetries(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		enginetest.PhaseOutlivesRetries(t, target(b.open(t)).Open(t, nil).Store, false)
	})
}
