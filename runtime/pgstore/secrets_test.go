package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestSecretsKeepDataOutOfTheTable(t *testing.T) {
	testURL(t)
	enginetest.Secrets(t, target())
}
