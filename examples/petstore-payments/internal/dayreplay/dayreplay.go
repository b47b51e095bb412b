package dayreplay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// options are the command-line settings.
type options struct {
	url         string
	apiKeys     string
	seed        uint64
	accounts    int
	transfers   int
	concurrency int
	timeout     time.Duration
	maxRequests int64
	duration    time.Duration
	attempts    int

	crash       bool
	serverBin   string
	serverArgs  string
	databaseURL string
	killEvery   time.Duration
}

// Main runs the replay and returns the exit code: 0 when the day ran, 1 when
// it could not, 2 for bad arguments. The audit's verdict is in the table,
// not in the exit code, so that a run without idempotency still reports.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fl := flag.NewFlagSet("dayreplay", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&o.url, "url", "http://127.0.0.1:8080", "the server to replay against (loopback only); ignored with --crash")
	fl.StringVar(&o.apiKeys, "api-keys", "demo-key-acme=acme,demo-key-globex=globex", "the server's API keys, key=tenant,…; one client population per key")
	fl.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic day; the same seed plans the same day")
	fl.IntVar(&o.accounts, "accounts", 8, "accounts per tenant")
	fl.IntVar(&o.transfers, "transfers", 400, "transfers the clients mean to make")
	fl.IntVar(&o.concurrency, "concurrency", 16, "clients sending at once")
	fl.DurationVar(&o.timeout, "timeout", 300*time.Millisecond, "client timeout per request; a timed-out request is retried")
	fl.Int64Var(&o.maxRequests, "max-requests", 20000, "stop issuing requests after this many")
	fl.DurationVar(&o.duration, "duration", 2*time.Minute, "stop issuing requests after this long")
	fl.IntVar(&o.attempts, "attempts", 12, "attempts per request before a client gives up")
	fl.BoolVar(&o.crash, "crash", false, "start the server here and SIGKILL and restart it at random moments")
	fl.StringVar(&o.serverBin, "server-bin", "", "with --crash: the built server binary; empty builds it with go build")
	fl.StringVar(&o.serverArgs, "server-args", "", "with --crash: extra server flags, space-separated, such as \"--idempotency=off --chaos-delay=300ms\"")
	fl.StringVar(&o.databaseURL, "database-url", "", "with --crash: the server's database; empty uses a fresh SQLite file")
	fl.DurationVar(&o.killEvery, "kill-every", 3*time.Second, "with --crash: mean time between kills")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.accounts < 2 || o.transfers < 1 || o.concurrency < 1 || o.attempts < 1 {
		fmt.Fprintln(stderr, "dayreplay: --accounts must be at least 2; --transfers, --concurrency and --attempts at least 1")
		return 2
	}
	keys, err := parseKeys(o.apiKeys)
	if err != nil {
		fmt.Fprintln(stderr, "dayreplay:", err)
		return 2
	}
	if err := run(ctx, o, keys, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "dayreplay:", err)
		return 1
	}
	return 0
}

func parseKeys(s string) ([]string, error) {
	var keys []string
	for _, pair := range strings.Split(s, ",") {
		k, _, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("API key %q: want key=tenant", pair)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// checkLoopback refuses to send a synthetic day anywhere but this machine.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("--url %q: want http://host:port", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--url %q: dayreplay only replays against a loopback address", raw)
	}
	return nil
}

func run(ctx context.Context, o options, keys []string, stdout, stderr io.Writer) error {
	p := newPlan(o.seed, len(keys), o.accounts, o.transfers)
	base := o.url
	var srv *managedServer
	if o.crash {
		var err error
		srv, err = startManaged(ctx, o, stderr)
		if err != nil {
			return err
		}
		defer srv.close()
		base = srv.url
	} else if err := checkLoopback(base); err != nil {
		return err
	}
	r := newReplayer(base, keys, o)
	fmt.Fprintf(stderr, "dayreplay: seed %d, %d tenants × %d accounts, %d transfers, %d clients, timeout %v, against %s\n",
		o.seed, len(keys), o.accounts, o.transfers, o.concurrency, o.timeout, base)
	start := time.Now()
	dayCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	if srv != nil {
		go srv.chaos(dayCtx, o.seed, o.killEvery)
	}
	if err := r.openAccounts(dayCtx, p); err != nil {
		return err
	}
	r.replay(dayCtx, p)
	elapsed := time.Since(start)
	cancel()
	if srv != nil {
		if err := srv.ensureUp(ctx); err != nil {
			return err
		}
	}
	a, err := r.audit(ctx, p)
	if err != nil {
		return err
	}
	kills := 0
	if srv != nil {
		kills = srv.kills()
	}
	printTable(stdout, r, a, len(p.transfers), kills, elapsed)
	return nil
}

// tempDir is where --crash keeps its database and binary.
func tempDir() (string, error) { return os.MkdirTemp("", "dayreplay-") }
