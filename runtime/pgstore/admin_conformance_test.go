package pgstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idemadmin/admintest"
)

// The operator's conformance suite, the one every store passes.
func TestAdminConformance(t *testing.T) {
	testURL(t)
	admintest.Run(t, target())
}
