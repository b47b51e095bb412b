package redisstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest"
)

// The recovery-point suite, on Redis's own clock, against a single node
// and a cluster.
func TestPhases(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		storetest.RunPhases(t, target(b.open(t)))
	})
}
