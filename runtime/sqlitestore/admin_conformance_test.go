package sqlitestore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idemadmin/admintest"
)

// The operator's conformance suite, the one every store passes.
func TestAdminConformance(t *testing.T) {
	admintest.Run(t, target)
}
