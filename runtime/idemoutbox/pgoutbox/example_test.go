package pgoutbox_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
)

// send hands an effect to its receiver.
func send(context.Context, idemoutbox.Message) error { return nil }

// The runner as a process of its own: it needs the database and the
// receivers, not the engine or the handlers. Run as many as wanted.
func ExampleNew_runnerProcess() {
	// docs:begin process
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	runner, err := idemoutbox.NewRunner(idemoutbox.Config{
		Store:   pgoutbox.New(pool, idemoutbox.Options{}),
		Deliver: send,
		Lease:   2 * time.Minute, // well above the receivers' timeouts
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = runner.Run(ctx) // until SIGTERM, then drains
	// docs:end process
}
