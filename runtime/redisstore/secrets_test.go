package redisstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

func TestSecretsKeepDataOutOfRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		enginetest.Secrets(t, target(b.open(t)))
	})
}
