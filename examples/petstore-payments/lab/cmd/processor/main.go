// Command processor is the fake payment processor and receipt receiver of
// petstore-payments' days (package lab/processor), a process of its own:
//
//	go run ./examples/petstore-payments/lab/cmd/processor --addr 127.0.0.1:8090 --dir /tmp/processor
//
// and the service pointed at it:
//
//	go run ./examples/petstore-payments --processor-url http://127.0.0.1:8090 --receipts-url http://127.0.0.1:8090/v1/receipts
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/processor"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run serves until SIGINT or SIGTERM and returns the exit code.
func run(args []string, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fl := flag.NewFlagSet("processor", flag.ContinueOnError)
	fl.SetOutput(stderr)
	addr := fl.String("addr", "127.0.0.1:8090", "listen address")
	dir := fl.String("dir", ".", "the directory of the journals of charges and receipts, kept across restarts")
	delay := fl.Duration("delay", 0, "a random pause up to this long before each charge and receipt is served")
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil || fl.NArg() > 0 || *delay < 0 {
		log.Error("bad arguments", "args", fl.Args())
		return 2
	}
	p, err := processor.Open(*dir, *delay)
	if err != nil {
		log.Error("open", "err", err)
		return 1
	}
	defer p.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	log.Info("listening on "+ln.Addr().String(), "dir", *dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shut)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}
