// Package app wires the payments service together: flags, database,
// schema, the idempotency engine, the HTTP server and its shutdown.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/examples/petstore-payments/migrations"
	"github.com/idemgen/idemgen/runtime/idemshed"
)

// ProblemBase prefixes the type URI of every problem the service answers,
// its own and the idempotency layer's.
const ProblemBase = "https://petstore-payments.example/problems/"

// shutdownGrace is how long in-flight requests get after SIGTERM.
const shutdownGrace = 10 * time.Second

// maxBodyBytes bounds a request's body.
const maxBodyBytes = 1 << 20

// Main runs the service until SIGINT or SIGTERM and returns the exit code.
func Main(args []string, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fl := flag.NewFlagSet("petstore-payments", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := NewOptions(fl, os.Getenv)
	if err := Parse(fl, args, o); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		log.Error("bad arguments", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, o, Lab{}, log); err != nil {
		log.Error("petstore-payments stopped", "err", err)
		return 1
	}
	return 0
}

// Parse parses args into fl, which holds the flags of o, and checks o.
func Parse(fl *flag.FlagSet, args []string, o *Options) error {
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fl.Args(), " "))
	}
	return o.Check()
}

// Run serves the service with the options o, changed by lab, until ctx
// ends, and then shuts it down.
func Run(ctx context.Context, o *Options, lab Lab, log *slog.Logger) error {
	if lab.Protect != nil && o.store != "" {
		return errors.New("--idempotency-store has no use without the idempotency layer")
	}
	if lab.Protect != nil && (o.processorURL != "" || o.receiptsURL != "") {
		return errors.New("--processor-url and --receipts-url need the idempotency layer: the charge's key and the receipt's outbox are its")
	}
	keys, err := tenantKeys(o, log)
	if err != nil {
		return err
	}
	db, err := database.Open(ctx, o.databaseURL, o.maxInFlight)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Migrate(ctx, migrations.FS()); err != nil {
		return err
	}
	log.Info("database ready", "database", db.Name, "dialect", db.Dialect.String())

	cfg := server.Config{
		Ledger:       ledger.New(db.Dialect),
		Conn:         db.Conn(),
		Ready:        db.Ping,
		Keys:         keys,
		RateLimit:    o.rateLimit,
		AuthFailures: o.authFailures,
		AfterWrites:  lab.afterWrites(),
		ProblemBase:  ProblemBase,
		MaxBodyBytes: maxBodyBytes,
		Logger:       log,
	}
	shed, err := admission(o)
	if err != nil {
		return err
	}
	cfg.Admission = shed.Middleware
	met, err := newMetrics(o.metrics)
	if err != nil {
		return err
	}
	var l *layer
	if lab.Protect != nil {
		err = lab.Protect(ctx, db, &cfg, log)
	} else {
		l, err = mountLayer(ctx, o, db, &cfg, met, log)
	}
	if err != nil {
		return err
	}
	defer l.release()
	runner, err := settle(o, l, &cfg, log)
	if err != nil {
		return err
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	if err := met.watch(srv, shed); err != nil {
		return err
	}
	if err := l.checkRoutes(srv.Route); err != nil {
		return err
	}
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSweep()
	go l.sweep(sweepCtx, log)
	stopRunner := runReceipts(ctx, runner, log)
	defer stopRunner()
	return serve(ctx, o, lab, met.handler(srv), keys, log)
}

// tenantKeys returns the configured API keys, each mapped to its tenant.
func tenantKeys(o *Options, log *slog.Logger) (map[string]string, error) {
	spec, demo, err := o.keySpec()
	if err != nil {
		return nil, err
	}
	keys, err := parseKeys(spec)
	if err != nil {
		return nil, err
	}
	if demo {
		log.Warn("no API keys given (API_KEYS, --api-keys-file or --api-keys); using demo keys", "keys", demoKeys)
	}
	return keys, nil
}

// admission bounds the requests served at once, as o says.
func admission(o *Options) (*idemshed.Shedder, error) {
	shed, err := idemshed.New(idemshed.Config{
		MaxInFlight: o.maxInFlight,
		MaxQueue:    o.maxQueue,
		MaxWait:     o.maxWait,
		// A short wait: a refused client's retry under the same key finds
		// the server less busy without giving up its place for long.
		RetryAfter:    time.Second,
		CongestedWait: min(idemshed.DefaultCongestedWait, o.maxWait),
		ProblemBase:   ProblemBase,
		// Bodies are read ahead as the server bounds them: a body that
		// has not arrived within the read timeout holds no slot.
		MaxBodyBytes: maxBodyBytes,
		BodyTimeout:  o.readTimeout,
		// The retries refused longest ago come first, each tenant's
		// remembered apart: admission stands after authentication.
		Key:    idemshed.HeaderKey(api.CreateTransferPolicy().Key.Name),
		Tenant: server.TenantFromRequest,
	})
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	return shed, nil
}

// serve listens on o's address and serves h until ctx ends, then gives
// in-flight requests shutdownGrace to finish.
func serve(ctx context.Context, o *Options, lab Lab, h http.Handler, keys map[string]string, log *slog.Logger) error {
	tcp, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ln := newLimitListener(tcp, o.maxConns)
	names := make([]string, 0, len(keys))
	for _, t := range keys {
		names = append(names, t)
	}
	sort.Strings(names)
	log.Info("listening on "+ln.Addr().String(), "addr", ln.Addr().String(),
		"idempotency_store", storeName(o.store),
		"tenants", strings.Join(names, ","), "rate_limit", o.rateLimit, "auth_failures", o.authFailures,
		"read_timeout", o.readTimeout, "write_timeout", o.writeTimeout+lab.Pause,
		"idle_timeout", o.idleTimeout, "max_conns", o.maxConns,
		"max_in_flight", o.maxInFlight, "max_queue", o.maxQueue, "max_wait", o.maxWait)

	hs := httpServer(o, lab.Pause, h, log)
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down; finishing in-flight requests", "grace", shutdownGrace)
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// storeName names where the keys are kept, for the start-up log line.
func storeName(storeURL string) string {
	if storeURL == "" {
		return "sql"
	}
	return "redis+sql"
}
