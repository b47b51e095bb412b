package redisstore_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idemadmin/admintest"
)

// The operator's conformance suite, the one every store passes, against a
// single node and a cluster (where a listing walks every primary).
func TestAdminConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		admintest.Run(t, target(b.open(t)))
	})
}
