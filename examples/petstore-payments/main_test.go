package main_test

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// bins are the service, the lab's server and the fake payment processor,
// built once for the whole run by TestMain; tests build other commands they
// need in bins.Dir (idemgenBinary).
var bins labtest.Binaries

func TestMain(m *testing.M) {
	code := labtest.Run(m, &bins)
	redisCluster.Stop()
	os.Exit(code)
}
