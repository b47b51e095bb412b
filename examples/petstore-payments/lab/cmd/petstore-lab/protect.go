package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/handwritten"
)

// protection returns the app.Lab's Protect of --idempotency: nil for on
// (idemgen's layer), or what mounts the transactional operations with
// no idempotency (off) or on the hand-written key table (handwritten).
func protection(mode string) (func(context.Context, *database.DB, *server.Config, *slog.Logger) error, error) {
	switch mode {
	case "on":
		return nil, nil
	case "off":
		return unprotected, nil
	case "handwritten":
		return mountHandwritten, nil
	}
	return nil, fmt.Errorf("--idempotency must be on, off or handwritten, not %q", mode)
}

// unprotected runs the transactional operations of cfg in plain
// transactions: a retried POST runs again.
func unprotected(_ context.Context, db *database.DB, cfg *server.Config, log *slog.Logger) error {
	log.Warn("idempotency is off: retried POSTs run again")
	cfg.Begin = db.Begin
	return nil
}

// mountHandwritten mounts the transactional operations of cfg on the
// hand-written key table, created in db if it is missing. The other
// operations run unprotected.
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
