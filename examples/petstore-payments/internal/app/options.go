package app

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/database"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// demoKeys authenticate two demo tenants when no keys are configured.
const demoKeys = "demo-key-acme=acme,demo-key-globex=globex"

// Options are the service's settings, from its flags and environment.
type Options struct {
	getenv       func(string) string
	addr         string
	databaseURL  string
	apiKeys      string
	apiKeysFile  string
	rateLimit    float64
	authFailures int
	// store is the --idempotency-store URL: "" keeps every key in the
	// SQL database, redis://… (or redis+cluster://…) the
	// non-transactional operations' keys in Redis (a Redis Cluster)
	// under redisPrefix.
	store        string
	redisPrefix  string
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
	// duplicateWait is idem.Config.DuplicateWait: how long a concurrent
	// duplicate waits for the first request's answer before its 409.
	duplicateWait time.Duration
	metrics       bool
	// labelSecretFile holds the secret that keys the labels under which
	// the engine logs keys (idem.Config.KeyLabelSecret); without it the
	// secret is KEY_LABEL_SECRET, read at start.
	labelSecretFile string
	// processorURL is the payment processor transfers are charged at, and
	// receiptsURL the receiver their receipts are delivered to; "" for
	// none (internal/payments).
	processorURL string
	receiptsURL  string
}

// NewOptions registers the service's flags on fl, with defaults from
// getenv, and returns the options that parsing fl fills. Check them after
// parsing.
func NewOptions(fl *flag.FlagSet, getenv func(string) string) *Options {
	o := &Options{getenv: getenv}
	fl.StringVar(&o.addr, "addr", envOr(getenv, "ADDR", "127.0.0.1:8080"), "listen address (env ADDR)")
	fl.StringVar(&o.databaseURL, "database-url", getenv("DATABASE_URL"),
		"postgres://…, sqlite:PATH or file:PATH (env DATABASE_URL); default: the SQLite file "+database.DefaultSQLiteFile+" in the working directory")
	fl.StringVar(&o.apiKeys, "api-keys", "", "bearer keys as key=tenant,key=tenant; other local users can read a command line, prefer env API_KEYS or --api-keys-file")
	fl.StringVar(&o.apiKeysFile, "api-keys-file", "", "a file of key=tenant entries, separated by commas or new lines; # starts a comment")
	fl.Float64Var(&o.rateLimit, "rate-limit", 0, "requests per second allowed per tenant; 0 is unlimited")
	fl.IntVar(&o.authFailures, "auth-failures", 10, "failed authentications allowed per client address (an IPv6 /64) per minute, at most this many in a burst; 0 is unlimited")
	fl.StringVar(&o.store, "idempotency-store", getenv("IDEMPOTENCY_STORE"),
		"redis://[user:password@]host:port/db (or rediss://) to keep the keys of the non-transactional operations in Redis, or redis+cluster://[user:password@]host:port?addr=host2:port&addr=host3:port (or rediss+cluster://) in a Redis Cluster (env IDEMPOTENCY_STORE); the transactional ones stay in the SQL database, as every key does by default")
	fl.StringVar(&o.redisPrefix, "redis-key-prefix", redisstore.DefaultPrefix, "the start of every Redis key name the service writes, so that several services can share one Redis")
	fl.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest time to read one request, header and body")
	fl.DurationVar(&o.writeTimeout, "write-timeout", 30*time.Second, "longest time from a request's header to the end of its answer")
	fl.DurationVar(&o.idleTimeout, "idle-timeout", 60*time.Second, "how long a keep-alive connection may wait for its next request")
	fl.IntVar(&o.maxConns, "max-conns", 1024, "connections open at once; a connection beyond them is closed as soon as it is accepted")
	fl.IntVar(&o.maxInFlight, "max-in-flight", 8, "requests served at once; a request beyond them waits for a slot (see --max-queue) or is answered 503 with Retry-After at once")
	fl.IntVar(&o.maxQueue, "max-queue", 64, "requests that may wait for a slot; 0 refuses every request beyond --max-in-flight at once")
	fl.DurationVar(&o.maxWait, "max-wait", 100*time.Millisecond, "longest a request waits for a slot before it is refused (far less while the queue stays full)")
	fl.DurationVar(&o.duplicateWait, "duplicate-wait", 0, "how long a request that meets its key in flight waits for the first's answer, then replays it, before it is answered 409 (0: at once)")
	fl.BoolVar(&o.metrics, "metrics", false, "serve the idempotency layer's Prometheus metrics at GET /metrics")
	fl.StringVar(&o.labelSecretFile, "key-label-secret-file", "", "a file holding the secret that keys the labels idempotency keys are logged under (default: env KEY_LABEL_SECRET); `idemgen keys` finds a logged key with the same secret")
	fl.StringVar(&o.processorURL, "processor-url", getenv("PROCESSOR_URL"), "the payment processor's base URL (env PROCESSOR_URL): each transfer is charged there, once, under its effect key (POST …/v1/charges); default: none")
	fl.StringVar(&o.receiptsURL, "receipts-url", getenv("RECEIPTS_URL"), "where each transfer's receipt is POSTed, through the transactional outbox, once the transfer commits (env RECEIPTS_URL); default: none")
	return o
}

// Check reports the first setting the service cannot run with.
func (o *Options) Check() error {
	if o.redisPrefix == "" {
		return errors.New("--redis-key-prefix must not be empty")
	}
	if o.rateLimit < 0 || o.authFailures < 0 {
		return errors.New("--rate-limit and --auth-failures must not be negative")
	}
	if o.readTimeout <= 0 || o.writeTimeout <= 0 || o.idleTimeout <= 0 || o.maxConns < 1 || o.maxInFlight < 1 || o.maxWait <= 0 {
		return errors.New("--read-timeout, --write-timeout, --idle-timeout, --max-conns, --max-in-flight and --max-wait must be positive")
	}
	if o.maxQueue < 0 {
		return errors.New("--max-queue must not be negative")
	}
	if o.apiKeys != "" && o.apiKeysFile != "" {
		return errors.New("give --api-keys or --api-keys-file, not both")
	}
	return nil
}

// keySpec returns the configured keys as key=tenant entries, read from
// --api-keys-file when given, and whether they are the demo keys.
func (o *Options) keySpec() (spec string, demo bool, err error) {
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
	spec = o.apiKeys
	if spec == "" {
		spec = o.getenv("API_KEYS")
	}
	if spec == "" {
		return demoKeys, true, nil
	}
	return spec, false, nil
}

// keyLabelSecret returns the key label secret, read from
// --key-label-secret-file when given. A file written by an editor or echo
// ends with a newline that is not part of the secret, as `idemgen keys`
// also reads it.
func (o *Options) keyLabelSecret() ([]byte, error) {
	if o.labelSecretFile == "" {
		return []byte(o.getenv("KEY_LABEL_SECRET")), nil
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
