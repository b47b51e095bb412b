// Package app wires the payments service together: flags, database,
// schema, the idempotency engine, the HTTP server and its shutdown.
package app

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/ledger"
	"github.com/idemgen/idemgen/examples/petstore-payments/internal/server"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemshed"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// ProblemBase prefixes the type URI of every problem the service answers,
// its own and the idempotency layer's.
const ProblemBase = "https://petstore-payments.example/problems/"

// demoKeys authenticate two demo tenants when no keys are configured.
const demoKeys = "demo-key-acme=acme,demo-key-globex=globex"

// shutdownGrace is how long in-flight requests get after SIGTERM.
const shutdownGrace = 10 * time.Second

// options are the command-line settings.
type options struct {
	addr         string
	databaseURL  string
	apiKeys      string
	apiKeysFile  string
	rateLimit    float64
	authFailures int
	idempotency  string
	// store is the --idempotency-store URL: "" keeps every key in the
	// SQL database, redis://… (or redis+cluster://…) the
	// non-transactional operations' keys in Redis (a Redis Cluster)
	// under redisPrefix.
	store        string
	redisPrefix  string
	chaosDelay   time.Duration
	readTimeout  time.Duration
	writeTimeout time.Duration
	idleTimeout  time.Duration
	maxConns     int
	// maxInFlight, maxQueue and maxWait shape admission (idemshed): the
	// requests served at once, those that may wait for a slot, and how
	// long one may wait.
	maxInFlight int
	maxQueue    int
	maxWait     time.Duration
	metrics     bool
	// labelSecret keys the labels under which the engine logs keys
	// (idem.Config.KeyLabelSecret), from KEY_LABEL_SECRET or the file of
	// --key-label-secret-file, read at start.
	labelSecret     string
	labelSecretFile string
	// cpuProfile and memProfile name the files the CPU and allocation
	// profiles of the whole run are written to at exit (profile.go).
	cpuProfile string
	memProfile string
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fl := flag.NewFlagSet("petstore-payments", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&o.addr, "addr", envOr(getenv, "ADDR", "127.0.0.1:8080"), "listen address (env ADDR)")
	fl.StringVar(&o.databaseURL, "database-url", getenv("DATABASE_URL"),
		"postgres://…, sqlite:PATH or file:PATH (env DATABASE_URL); default: the SQLite file "+database.DefaultSQLiteFile+" in the working directory")
	fl.StringVar(&o.apiKeys, "api-keys", "", "bearer keys as key=tenant,key=tenant; other local users can read a command line, prefer env API_KEYS or --api-keys-file")
	fl.StringVar(&o.apiKeysFile, "api-keys-file", "", "a file of key=tenant entries, separated by commas or new lines; # starts a comment")
	fl.Float64Var(&o.rateLimit, "rate-limit", 0, "requests per second allowed per tenant; 0 is unlimited")
	fl.IntVar(&o.authFailures, "auth-failures", 10, "failed authentications allowed per client address (an IPv6 /64) per minute, at most this many in a burst; 0 is unlimited")
	fl.StringVar(&o.idempotency, "idempotency", "on", "on; off to serve the API with no idempotency layer at all; or handwritten to protect only the transactional operations with a hand-written key table, the design idemgen's benchmark compares with (PostgreSQL only)")
	fl.StringVar(&o.store, "idempotency-store", getenv("IDEMPOTENCY_STORE"),
		"redis://[user:password@]host:port/db (or rediss://) to keep the keys of the non-transactional operations in Redis, or redis+cluster://[user:password@]host:port?addr=host2:port&addr=host3:port (or rediss+cluster://) in a Redis Cluster (env IDEMPOTENCY_STORE); the transactional ones stay in the SQL database, as every key does by default")
	fl.StringVar(&o.redisPrefix, "redis-key-prefix", redisstore.DefaultPrefix, "the start of every Redis key name the service writes, so that several services can share one Redis")
	fl.DurationVar(&o.chaosDelay, "chaos-delay", 0, "random pause up to this long in write handlers, after the writes and before the response")
	fl.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest time to read one request, header and body")
	fl.DurationVar(&o.writeTimeout, "write-timeout", 30*time.Second, "longest time from a request's header to the end of its answer, plus --chaos-delay")
	fl.DurationVar(&o.idleTimeout, "idle-timeout", 60*time.Second, "how long a keep-alive connection may wait for its next request")
	fl.IntVar(&o.maxConns, "max-conns", 1024, "connections open at once; a connection beyond them is closed as soon as it is accepted")
	fl.IntVar(&o.maxInFlight, "max-in-flight", 8, "requests served at once; a request beyond them waits for a slot (see --max-queue) or is answered 503 with Retry-After at once")
	fl.IntVar(&o.maxQueue, "max-queue", 64, "requests that may wait for a slot; 0 refuses every request beyond --max-in-flight at once")
	fl.DurationVar(&o.maxWait, "max-wait", 100*time.Millisecond, "longest a request waits for a slot before it is refused (far less while the queue stays full)")
	fl.BoolVar(&o.metrics, "metrics", false, "serve the idempotency layer's Prometheus metrics at GET /metrics")
	fl.StringVar(&o.labelSecretFile, "key-label-secret-file", "", "a file holding the secret that keys the labels idempotency keys are logged under (default: env KEY_LABEL_SECRET); `idemgen keys` finds a logged key with the same secret")
	fl.StringVar(&o.cpuProfile, "cpu-profile", "", "write a CPU profile of the run to this file (pprof), for profiling under a benchmark's load")
	fl.StringVar(&o.memProfile, "mem-profile", "", "write the run's allocation profile to this file (pprof) at exit")
	if err := fl.Parse(args); err != nil {
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fl.Args(), " "))
	}
	if o.idempotency != "on" && o.idempotency != "off" && o.idempotency != "handwritten" {
		return o, fmt.Errorf("--idempotency must be on, off or handwritten, not %q", o.idempotency)
	}
	if o.store != "" && o.idempotency != "on" {
		return o, fmt.Errorf("--idempotency-store has no use with --idempotency=%s", o.idempotency)
	}
	if o.redisPrefix == "" {
		return o, errors.New("--redis-key-prefix must not be empty")
	}
	if o.rateLimit < 0 || o.chaosDelay < 0 || o.authFailures < 0 {
		return o, errors.New("--rate-limit, --auth-failures and --chaos-delay must not be negative")
	}
	if o.readTimeout <= 0 || o.writeTimeout <= 0 || o.idleTimeout <= 0 || o.maxConns < 1 || o.maxInFlight < 1 || o.maxWait <= 0 {
		return o, errors.New("--read-timeout, --write-timeout, --idle-timeout, --max-conns, --max-in-flight and --max-wait must be positive")
	}
	if o.maxQueue < 0 {
		return o, errors.New("--max-queue must not be negative")
	}
	if o.apiKeys != "" && o.apiKeysFile != "" {
		return o, errors.New("give --api-keys or --api-keys-file, not both")
	}
	if o.apiKeys == "" && o.apiKeysFile == "" {
		o.apiKeys = getenv("API_KEYS")
	}
	if o.labelSecretFile == "" {
		o.labelSecret = getenv("KEY_LABEL_SECRET")
	}
	return o, nil
}

// keySpec returns the configured keys as key=tenant entries, read from
// --api-keys-file when given, and whether they are the demo keys.
func (o options) keySpec() (spec string, demo bool, err error) {
	if o.apiKeysFile != "" {
		b, err := os.ReadFile(o.apiKeysFile)
		if err != nil {
			return "", false, fmt.Errorf("read API keys: %w", err)
		}
		var entries []string
		for _, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			entries = append(entries, line)
		}
		return strings.Join(entries, ","), false, nil
	}
	if o.apiKeys == "" {
		return demoKeys, true, nil
	}
	return o.apiKeys, false, nil
}

// keyLabelSecret returns the key label secret, read from
// --key-label-secret-file when given. A file written by an editor or echo
// ends with a newline that is not part of the secret, as `idemgen keys`
// also reads it.
func (o options) keyLabelSecret() ([]byte, error) {
	if o.labelSecretFile == "" {
		return []byte(o.labelSecret), nil
	}
	b, err := os.ReadFile(o.labelSecretFile)
	if err != nil {
		return nil, fmt.Errorf("read key label secret: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("key label secret file %s is empty", o.labelSecretFile)
	}
	return b, nil
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// parseKeys reads key=tenant,key=tenant. A malformed entry is named by
// its place, never shown: an entry without its "=tenant" is a bare key,
// and the error goes to the log.
func parseKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, t, ok := strings.Cut(pair, "=")
		if !ok || k == "" || t == "" {
			return nil, fmt.Errorf("API keys: entry %d (counting commas and lines from 1) is not key=tenant; it is not shown, as it may hold a key", i+1)
		}
		keys[k] = t
	}
	if len(keys) == 0 {
		return nil, errors.New("no API keys")
	}
	return keys, nil
}

// Main runs the service until SIGINT or SIGTERM and returns the exit code.
// migrations holds the generated idempotency migrations, one directory per
// dialect.
func Main(args []string, migrations fs.FS, stderr io.Writer) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	o, err := parseFlags(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		log.Error("bad arguments", "err", err)
		return 2
	}
	stopProfiles, err := startProfiles(o.cpuProfile, o.memProfile)
	if err != nil {
		log.Error("profiling", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = run(ctx, o, migrations, log)
	if perr := stopProfiles(); perr != nil {
		log.Error("profiling", "err", perr)
	}
	if err != nil {
		log.Error("petstore-payments stopped", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, o options, migrations fs.FS, log *slog.Logger) error {
	keySpec, demo, err := o.keySpec()
	if err != nil {
		return err
	}
	keys, err := parseKeys(keySpec)
	if err != nil {
		return err
	}
	labelSecret, err := o.keyLabelSecret()
	if err != nil {
		return err
	}
	if demo {
		log.Warn("no API keys given (API_KEYS, --api-keys-file or --api-keys); using demo keys", "keys", demoKeys)
	}

	db, err := database.Open(ctx, o.databaseURL, o.maxInFlight)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Migrate(ctx, migrations); err != nil {
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
		ChaosDelay:   o.chaosDelay,
		ProblemBase:  ProblemBase,
		MaxBodyBytes: 1 << 20,
		Logger:       log,
	}
	var sweeper idemstore.Sweeper
	var checkRoutes func(idem.RouteLookup) error
	shed, err := idemshed.New(idemshed.Config{
		MaxInFlight: o.maxInFlight,
		MaxQueue:    o.maxQueue,
		MaxWait:     o.maxWait,
		// A short wait: a refused client's retry under the same key finds
		// the server less busy without giving up its place for long.
		RetryAfter:    time.Second,
		CongestedWait: min(idemshed.DefaultCongestedWait, o.maxWait),
		ProblemBase:   ProblemBase,
	})
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	cfg.Admission = shed.Middleware
	met, err := newMetrics(o.metrics)
	if err != nil {
		return err
	}
	switch o.idempotency {
	case "on":
		l, err := newLayer(ctx, db, o.store, o.redisPrefix, idem.Config{
			Tenant:          server.TenantFromRequest,
			Logger:          log,
			ProblemBase:     ProblemBase,
			MaxRequestBytes: cfg.MaxBodyBytes,
			Observer:        met.observer(),
			KeyLabelSecret:  labelSecret,
		}, log)
		if err != nil {
			return err
		}
		if l.close != nil {
			defer l.close()
		}
		if l.ready != nil {
			// /healthz answers ready only when both stores answer: a
			// replica that cannot reach Redis refuses every account.
			cfg.Ready = func(ctx context.Context) error {
				if err := db.Ping(ctx); err != nil {
					return err
				}
				return l.ready(ctx)
			}
		}
		cfg.Idempotency = l.middleware
		cfg.Tx = l.mount
		sweeper = l.sweeper
		checkRoutes = l.check
	case "handwritten":
		if err := mountHandwritten(ctx, db, &cfg, log); err != nil {
			return err
		}
	default:
		log.Warn("idempotency is off: retried POSTs run again")
		cfg.Begin = db.Begin
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	if err := met.watch(srv, shed); err != nil {
		return err
	}
	if checkRoutes != nil {
		// Every protected operation must reach a handler that applies its
		// policy, its transactional ones a handler that takes its
		// transaction: a server never serves a route it cannot protect.
		if err := checkRoutes(srv.Route); err != nil {
			return fmt.Errorf("idempotency does not protect every route it should: %w", err)
		}
	}

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
	log.Info("listening on "+ln.Addr().String(), "addr", ln.Addr().String(), "idempotency", o.idempotency,
		"idempotency_store", storeName(o.store),
		"tenants", strings.Join(names, ","), "rate_limit", o.rateLimit, "auth_failures", o.authFailures,
		"chaos_delay", o.chaosDelay, "read_timeout", o.readTimeout, "write_timeout", o.writeTimeout+o.chaosDelay,
		"idle_timeout", o.idleTimeout, "max_conns", o.maxConns,
		"max_in_flight", o.maxInFlight, "max_queue", o.maxQueue, "max_wait", o.maxWait)

	hs := httpServer(o, met.handler(srv), log)
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSweep()
	if sweeper != nil {
		go func() { _ = idem.Sweep(sweepCtx, sweeper, idem.SweepConfig{Logger: log}) }()
	}

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
