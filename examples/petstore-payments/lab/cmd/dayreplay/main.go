// Command dayreplay replays a synthetic day of client traffic against the
// payments service and reports what retries did to the money: duplicate
// transfers, lost acknowledgements, amount changes accepted under a reused
// key, and whether money was conserved. See the example's README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dayreplay.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
