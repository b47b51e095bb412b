package memstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestPhaseStorm(t *testing.T) {
	enginetest.PhaseStorm(t, memstore.New(), false, 30, 3)
}
