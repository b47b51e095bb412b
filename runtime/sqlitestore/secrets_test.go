package sqlitestore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestSecretsKeepDataOutOfTheTable(t *testing.T) {
	enginetest.Secrets(t, target)
}
