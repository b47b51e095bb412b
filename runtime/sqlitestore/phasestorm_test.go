package sqlitestore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestPhaseStorm(t *testing.T) {
	enginetest.PhaseStorm(t, phaseTarget.Open(t, nil).Store, false, 30, 3)
}
