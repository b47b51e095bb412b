package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/storetest/model"
)

// TestModel drives the store, plain and transactional claims, through
// random sequences against the model of the store contract, on a clock the
// test sets. The handler transaction's own deadline runs on real time; a
// step ends its transaction long before the shortest lease (1s).
func TestModel(t *testing.T) {
	model.Run(t, model.Options{Runs: 3, Steps: 2000, ShrinkFor: 15 * time.Second}, target)
}
