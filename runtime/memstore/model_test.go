package memstore_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/storetest/model"
)

// TestModel drives the store through random sequences against the model of
// the store contract, on a clock the test sets.
func TestModel(t *testing.T) {
	model.Run(t, model.Options{Runs: 8, Steps: 3000, ShrinkFor: 10 * time.Second}, target)
}
