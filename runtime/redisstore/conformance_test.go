package redisstore_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/storetest"
	"github.com/idemgen/idemgen/runtime/storetest/model"
)

// The shared conformance suite, on Redis's own clock, against a single
// node and a cluster.
func TestConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		storetest.Run(t, target(b.open(t)))
	})
}

// TestModel drives the store through random sequences against the model of
// the store contract, on a clock the test sets.
func TestModel(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		model.Run(t, model.Options{Runs: 4, Steps: 2000, ShrinkFor: 20 * time.Second}, target(b.open(t)))
	})
}
