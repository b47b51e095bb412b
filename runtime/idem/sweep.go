package idem

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// SweepConfig configures Sweep.
type SweepConfig struct {
	// Every is the pause between sweeps; the default is one minute.
	Every time.Duration
	// Batch is the most rows one statement deletes; the default is 1000.
	// Small batches keep each delete short, so claims never wait behind it.
	Batch int
	// Logger receives a line per sweep that deleted rows, and errors. Nil
	// discards them.
	Logger *slog.Logger
}

// Sweep deletes expired keys until ctx is done: every cfg.Every it deletes
// batches of cfg.Batch rows until a batch comes back short. It is safe to
// run from every replica at once; a failed sweep is logged and tried again
// at the next tick. It returns ctx's error.
func Sweep(ctx context.Context, s idemstore.Sweeper, cfg SweepConfig) error {
	if cfg.Every <= 0 {
		cfg.Every = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for {
		total, err := sweepOnce(ctx, s, cfg.Batch)
		switch {
		case err != nil && ctx.Err() == nil:
			log.WarnContext(ctx, "idempotency sweep failed; trying again at the next tick", "deleted", total, "err", err)
		case total > 0:
			log.InfoContext(ctx, "idempotency sweep", "deleted", total)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sweepOnce deletes batches until one comes back short.
func sweepOnce(ctx context.Context, s idemstore.Sweeper, batch int) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, err := s.Sweep(ctx, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
	return total, ctx.Err()
}
