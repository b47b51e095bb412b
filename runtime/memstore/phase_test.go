package memstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestPhases(t *testing.T) {
	storetest.RunPhases(t, target)
}
