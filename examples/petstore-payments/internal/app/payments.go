package app

import (
	"context"
	"log/slog"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/payments"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
)

// settle sets cfg.Settle to charge the processor and stage the receipt of
// each transfer, as o asks, and returns the outbox's runner, nil without
// receipts. A nil layer, the lab's, has no effects (Run refuses the flags).
func settle(o *Options, l *layer, cfg *server.Config, log *slog.Logger) (*idemoutbox.Runner, error) {
	if l == nil {
		return nil, nil
	}
	p, err := payments.New(payments.Config{
		ProcessorURL: o.processorURL,
		ReceiptsURL:  o.receiptsURL,
		Outbox:       l.outbox,
		Logger:       log,
	})
	if err != nil || p == nil {
		return nil, err
	}
	cfg.Settle = p.Settle
	log.Info("transfers are settled outside the database", "processor", o.processorURL != "", "receipts", o.receiptsURL != "")
	return p.Runner()
}

// runReceipts runs the outbox's runner in the service until ctx ends or
// stop is called, and returns stop, which ends the runner and waits for
// it to drain; nil runs nothing. Serving ends first when it fails, ctx
// still running, and stop then ends the runner too.
func runReceipts(ctx context.Context, runner *idemoutbox.Runner, log *slog.Logger) (stop func()) {
	if runner == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := runner.Run(ctx); err != nil {
			log.Error("the receipts' runner stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
