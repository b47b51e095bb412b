package app

import (
	"context"
	"errors"
	"log/slog"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/handwritten"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
)

// mountHandwritten mounts the transactional operations of cfg on the
// hand-written key table (--idempotency=handwritten), created in db if it
// is missing. The other operations run unprotected.
func mountHandwritten(ctx context.Context, db *database.DB, cfg *server.Config, log *slog.Logger) error {
	if db.Pool == nil {
		return errors.New("--idempotency=handwritten runs on PostgreSQL only")
	}
	if err := handwritten.Migrate(ctx, db.Pool); err != nil {
		return err
	}
	log.Warn("idempotency is hand-written: only the transactional operations are protected, by a key table without fingerprints, leases or expiry")
	cfg.Tx = handwritten.Mount(db.Pool)
	return nil
}
