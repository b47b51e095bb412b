package lab_test

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// bins are the service, the lab's server and the fake payment processor,
// built once for the whole run by TestMain.
var bins labtest.Binaries

func TestMain(m *testing.M) { os.Exit(labtest.Run(m, &bins)) }
