// Command petstore-lab is the payments service with the switches of the
// lab's benchmarks and days: the service's flags, and --idempotency to
// serve with idemgen's layer, with none, or with the hand-written key
// table; --chaos-delay to pause write handlers after their writes; and
// --cpu-profile and --mem-profile to profile a run under load. See the
// example's README and docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/app"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run serves as the flags in args say until SIGINT or SIGTERM and returns
// the exit code.
func run(args []string, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fl := flag.NewFlagSet("petstore-lab", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := app.NewOptions(fl, os.Getenv)
	mode := fl.String("idempotency", "on", "on; off to serve the API with no idempotency layer at all; or handwritten to protect only the transactional operations with a hand-written key table, the design idemgen's benchmark compares with (PostgreSQL only)")
	chaos := fl.Duration("chaos-delay", 0, "random pause up to this long in write handlers, after the writes and before the response; the write timeout grows by it")
	cpuProfile := fl.String("cpu-profile", "", "write a CPU profile of the run to this file (pprof), for profiling under a benchmark's load")
	memProfile := fl.String("mem-profile", "", "write the run's allocation profile to this file (pprof) at exit")
	err := app.Parse(fl, args, o)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	lab := app.Lab{Pause: *chaos}
	if err == nil && *chaos < 0 {
		err = errors.New("--chaos-delay must not be negative")
	}
	if err == nil {
		lab.Protect, err = protection(*mode)
	}
	if err != nil {
		log.Error("bad arguments", "err", err)
		return 2
	}
	stopProfiles, err := startProfiles(*cpuProfile, *memProfile)
	if err != nil {
		log.Error("profiling", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = app.Run(ctx, o, lab, log)
	if perr := stopProfiles(); perr != nil {
		log.Error("profiling", "err", perr)
	}
	if err != nil {
		log.Error("petstore-lab stopped", "err", err)
		return 1
	}
	return 0
}
