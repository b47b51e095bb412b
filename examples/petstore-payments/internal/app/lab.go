package app

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
)

// Lab is what the lab's server (lab/cmd/petstore-lab) changes in the
// service for its benchmarks and days. The zero value changes nothing,
// and the service's own command runs with it.
type Lab struct {
	// Protect, when set, protects the transactional operations of cfg its
	// own way (server.Config.Tx or Begin) instead of the idempotency
	// layer: no layer is built, and the other operations run unprotected.
	Protect func(ctx context.Context, db *database.DB, cfg *server.Config, log *slog.Logger) error
	// Pause, when positive, pauses each write handler for a random time
	// up to it after its writes, before its answer, so that client
	// timeouts and kills land where they hurt most. The write timeout
	// grows by it, so that the pause never costs a client its answer.
	Pause time.Duration
}

// afterWrites is server.Config.AfterWrites for the lab's pause: nil when
// there is none.
func (lab Lab) afterWrites() func() {
	if lab.Pause <= 0 {
		return nil
	}
	return func() { time.Sleep(rand.N(lab.Pause)) }
}
