package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest"
)

func TestPhases(t *testing.T) {
	testURL(t)
	storetest.RunPhases(t, target())
}
