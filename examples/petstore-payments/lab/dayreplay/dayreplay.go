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

// Config is one day's settings. DefaultConfig holds the command's defaults;
// Run refuses a Config whose sizes are out of range.
type Config struct {
	// URL is the server to replay against, on a loopback address. Ignored
	// with Crash, where Run starts the server itself.
	URL string
	// APIKeys are the server's API keys, "key=tenant,…"; each key is one
	// tenant's population of clients.
	APIKeys string
	// Seed plans the day: the same seed and sizes plan the same day.
	Seed uint64
	// Accounts is the number of accounts each tenant opens (at least 2).
	Accounts int
	// Transfers is the number of transfers the clients mean to make.
	Transfers int
	// Concurrency is the number of clients sending at once.
	Concurrency int
	// Timeout is a client's deadline per attempt; an attempt that misses it
	// is abandoned and retried under the same key. When TimeoutMax is
	// longer, each logical request's deadline is drawn between Timeout and
	// TimeoutMax, as from clients whose patience differs.
	Timeout, TimeoutMax time.Duration
	// MaxRequests stops the clients after this many requests in total.
	MaxRequests int64
	// Duration stops the clients after this long.
	Duration time.Duration
	// Attempts is how often a client sends one request before giving up.
	Attempts int
	// Budget, when positive, is how long a client keeps retrying one
	// request, counted from its first attempt, before giving up; zero
	// lets it retry until the day ends. It must be shorter than the
	// operations' TTL.
	Budget time.Duration

	// Client is the retry policy the clients follow; empty is Idemclient.
	Client Client

	// Crash makes Run start the server and SIGKILL and restart it at random
	// moments of the day.
	Crash bool
	// ServerBin is the built server binary for Crash; empty builds it with
	// the go command.
	ServerBin string
	// ServerArgs are extra server flags for Crash, such as "--chaos-delay=300ms".
	ServerArgs []string
	// DatabaseURL is the server's database for Crash; empty uses a fresh
	// SQLite file that is removed afterwards.
	DatabaseURL string
	// KillEvery is the mean time between kills with Crash.
	KillEvery time.Duration
	// MaxKills, when positive, ends the kills after this many; the rest of
	// the day runs on the last server started.
	MaxKills int
	// Processor, with Crash, runs the fake payment processor
	// (lab/cmd/processor) as a process of its own and points the server
	// at it, for each transfer's charge and receipt; the kills then take
	// turns on the server, the processor, and both at once (KillTargets),
	// and the audit counts the charges and receipts.
	Processor bool
	// ProcessorBin is the built processor for Processor; empty builds it.
	ProcessorBin string
	// ProcessorArgs are extra processor flags, such as "--delay=10ms".
	ProcessorArgs []string
	// ReceiptWait bounds the wait, after the day, for every committed
	// transfer's receipt; default 2 minutes.
	ReceiptWait time.Duration

	// Log receives progress lines, restart failures and the server build's
	// output; nil discards them.
	Log io.Writer
}

// DefaultConfig returns the settings the command uses when given no flags.
func DefaultConfig() Config {
	return Config{
		URL:         "http://127.0.0.1:8080",
		APIKeys:     "demo-key-acme=acme,demo-key-globex=globex",
		Seed:        1,
		Accounts:    8,
		Transfers:   400,
		Concurrency: 16,
		Timeout:     300 * time.Millisecond,
		MaxRequests: 20000,
		Duration:    2 * time.Minute,
		Attempts:    12,
		KillEvery:   3 * time.Second,
	}
}

func (c Config) validate() error {
	if c.Accounts < 2 || c.Transfers < 1 || c.Concurrency < 1 || c.Attempts < 1 {
		return errors.New("accounts must be at least 2; transfers, concurrency and attempts at least 1")
	}
	if c.Timeout <= 0 || c.Duration <= 0 || c.MaxRequests < 1 {
		return errors.New("timeout, duration and max-requests must be positive")
	}
	if c.TimeoutMax < 0 || c.Budget < 0 || c.MaxKills < 0 {
		return errors.New("timeout-max, budget and max-kills must not be negative")
	}
	if c.Crash && c.KillEvery <= 0 {
		return errors.New("kill-every must be positive")
	}
	if c.Processor && !c.Crash {
		return errors.New("processor needs crash: the day starts the processor beside the server it starts")
	}
	if c.Client != "" {
		if err := c.Client.valid(); err != nil {
			return err
		}
	}
	_, err := parseKeys(c.APIKeys)
	return err
}

// Report is what one day did, as audited from the state read back over the
// API afterwards.
type Report struct {
	// Client is the policy the day's clients followed.
	Client Client
	// Planned is the number of transfers of the plan; Started those a
	// client began before the day's time or request budget ran out.
	Planned, Started int
	// Requests counts every request sent, Retries those after a first
	// attempt, GaveUp the logical requests whose client ran out of attempts
	// or of time.
	Requests, Retries, GaveUp int64
	// TimedOut counts the attempts that their client's timeout cut off
	// before an answer's headers arrived.
	TimedOut int64
	// Slowest is the longest a transfer waited for its final answer (a
	// status other than 409, from any copy), from when its client began
	// it; transfers that got none are counted in Unanswered instead.
	Slowest time.Duration
	// P50 and P99 are the median and the 99th percentile of the answered
	// transfers' times to their final answers, measured as Slowest.
	P50, P99 time.Duration
	// SlowestEndings names the slowest transfer and how each of its
	// copies ended, as NotAcknowledged does.
	SlowestEndings string
	// Unexpected lists the transfers with an attempt answered otherwise
	// than a transfer may be (201, 409 or 503), each with how and when
	// every attempt under its key ended.
	Unexpected []string
	// Statuses counts the attempts answered, by status code, as
	// "201×2900 409×1200 503×40".
	Statuses string
	// Kills counts the SIGKILLs of the server (Crash only), and
	// ProcessorKills those of the processor.
	Kills, ProcessorKills int
	// Effects is the audit of the charges and receipts, with Processor.
	Effects *Effects
	// Acknowledged counts the distinct transfers answered with a 201.
	Acknowledged int
	// NotAcknowledged lists every started transfer that no copy saw
	// answered with a 201, as "key: ending; ending" with one ending per
	// copy sent: its final status and problem type, or why its client
	// gave up.
	NotAcknowledged []string
	// Unanswered counts the started transfers whose client got no final
	// answer: every copy gave up, or ended on a 409 such as
	// outcome-unknown, which leaves the client not knowing whether the
	// money moved.
	Unanswered int
	// Duplicates counts transfers beyond the first one found for a planned
	// transfer.
	Duplicates int
	// Lost counts acknowledged transfers that do not exist afterwards.
	Lost int
	// WronglyAccepted counts the amount changes under a reused key that
	// created a transfer, out of AmountChanges sent.
	WronglyAccepted, AmountChanges int
	// Conserved is true when every balance equals its initial balance plus
	// its transfers, and each tenant's total equals its initial total.
	Conserved bool
	// Problems explains each missing transfer and each balance that does
	// not add up.
	Problems []string
	// Elapsed is the time the clients spent, the audit excluded.
	Elapsed time.Duration
}

// Main runs the replay and returns the exit code: 0 when the day ran, 1 when
// it could not, 2 for bad arguments. The audit's verdict is in the table,
// not in the exit code, so that a run without idempotency still reports.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := DefaultConfig()
	var serverArgs string
	fl := flag.NewFlagSet("dayreplay", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&c.URL, "url", c.URL, "the server to replay against (loopback only); ignored with --crash")
	fl.StringVar(&c.APIKeys, "api-keys", c.APIKeys, "the server's API keys, key=tenant,…; one client population per key")
	fl.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the synthetic day; the same seed plans the same day")
	fl.IntVar(&c.Accounts, "accounts", c.Accounts, "accounts per tenant")
	fl.IntVar(&c.Transfers, "transfers", c.Transfers, "transfers the clients mean to make")
	fl.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "clients sending at once")
	fl.DurationVar(&c.Timeout, "timeout", c.Timeout, "client timeout per request; a timed-out request is retried")
	fl.DurationVar(&c.TimeoutMax, "timeout-max", 0, "when longer than --timeout, each request's timeout is drawn between the two")
	fl.Int64Var(&c.MaxRequests, "max-requests", c.MaxRequests, "stop issuing requests after this many")
	fl.DurationVar(&c.Duration, "duration", c.Duration, "stop issuing requests after this long")
	fl.IntVar(&c.Attempts, "attempts", c.Attempts, "attempts per request before a client gives up")
	fl.DurationVar(&c.Budget, "budget", 0, "when positive, how long a client retries one request before giving up, whatever --attempts allows")
	fl.StringVar((*string)(&c.Client), "client", string(Idemclient), "the clients' retry policy: idemclient (idemgen's own) or independent (attempt timeouts drawn anew, backoff from 25 ms to 1 s in its upper half, Retry-After honoured up to 2 s)")
	fl.BoolVar(&c.Crash, "crash", false, "start the server here and SIGKILL and restart it at random moments")
	fl.StringVar(&c.ServerBin, "server-bin", "", "with --crash: the built server binary, the lab's (lab/cmd/petstore-lab); empty builds it with go build")
	fl.StringVar(&serverArgs, "server-args", "", "with --crash: extra server flags, space-separated, such as \"--idempotency=off --chaos-delay=300ms\"")
	fl.StringVar(&c.DatabaseURL, "database-url", "", "with --crash: the server's database; empty uses a fresh SQLite file")
	fl.DurationVar(&c.KillEvery, "kill-every", c.KillEvery, "with --crash: mean time between kills")
	fl.IntVar(&c.MaxKills, "max-kills", 0, "with --crash: stop killing after this many kills; 0 is no limit")
	fl.BoolVar(&c.Processor, "processor", false, "with --crash: run the fake payment processor as a process of its own, charge and send a receipt for each transfer, kill it too, and audit charges and receipts")
	fl.StringVar(&c.ProcessorBin, "processor-bin", "", "with --processor: the built processor (lab/cmd/processor); empty builds it")
	var processorArgs string
	fl.StringVar(&processorArgs, "processor-args", "", "with --processor: extra processor flags, space-separated, such as \"--delay=10ms\"")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	c.ServerArgs = strings.Fields(serverArgs)
	c.ProcessorArgs = strings.Fields(processorArgs)
	c.Log = stderr
	if err := c.validate(); err != nil {
		fmt.Fprintln(stderr, "dayreplay:", err)
		return 2
	}
	rep, err := Run(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "dayreplay:", err)
		return 1
	}
	if err := rep.WriteTable(stdout); err != nil {
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

// Run plays one day against c.URL, or against a server it starts, kills
// and restarts when c.Crash is set, then audits the state over the API. An
// error means the day could not be played or audited; what the day did to
// the money, good or bad, is in the Report.
func Run(ctx context.Context, c Config) (Report, error) {
	if err := c.validate(); err != nil {
		return Report{}, err
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	keys, err := parseKeys(c.APIKeys)
	if err != nil {
		return Report{}, err
	}
	p := newPlan(c.Seed, len(keys), c.Accounts, c.Transfers)
	base := c.URL
	var srv *managed
	if c.Crash {
		srv, err = startManaged(ctx, c)
		if err != nil {
			return Report{}, err
		}
		defer srv.close()
		base = srv.server.url
	} else if err := checkLoopback(base); err != nil {
		return Report{}, err
	}
	r, err := newReplayer(base, keys, c)
	if err != nil {
		return Report{}, err
	}
	timeout := c.Timeout.String()
	if c.TimeoutMax > c.Timeout {
		timeout += "–" + c.TimeoutMax.String()
	}
	fmt.Fprintf(c.Log, "dayreplay: seed %d, %d tenants × %d accounts, %d transfers, %d %s clients, timeout %s, against %s\n",
		c.Seed, len(keys), c.Accounts, c.Transfers, c.Concurrency, c.client(), timeout, base)
	start := time.Now()
	dayCtx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	if err := r.openAccounts(dayCtx, p); err != nil {
		return Report{}, err
	}
	// The kills begin once the accounts are open. Opening an account is not
	// transactional, so a kill in the middle of it leaves its key's outcome
	// unknown for good (fail-closed), and the day would have no account to
	// move money from; transfers are what the day is about.
	chaosDone := make(chan struct{})
	if srv != nil {
		go func() {
			defer close(chaosDone)
			srv.chaos(dayCtx, c.Seed, c.KillEvery, c.MaxKills)
		}()
	} else {
		close(chaosDone)
	}
	// Deferred after srv.close, so it runs first: no restart may follow
	// the final stop.
	defer func() { cancel(); <-chaosDone }()
	started := r.replay(dayCtx, p)
	elapsed := time.Since(start)
	cancel()
	// A restart still under way when the day ends must finish before
	// ensureUp looks, or both would start a server on the same port.
	<-chaosDone
	if srv != nil {
		if err := srv.ensureUp(ctx); err != nil {
			return Report{}, err
		}
	}
	if err := r.settle(ctx, len(keys)); err != nil {
		return Report{}, err
	}
	rep, transfers, err := r.audit(ctx, p)
	if err != nil {
		return Report{}, err
	}
	if srv != nil && srv.processor != nil {
		if rep.Effects, err = auditEffects(ctx, srv.processor.url, transfers, c.ReceiptWait); err != nil {
			return Report{}, err
		}
		rep.ProcessorKills = srv.processor.kills()
		if rep.Effects.Unrecorded, err = srv.server.logLines(unrecordedDelivery); err != nil {
			return Report{}, err
		}
	}
	rep.Planned, rep.Started, rep.Elapsed = len(p.transfers), started, elapsed
	rep.Client = c.client()
	rep.Unanswered = r.unanswered(p.transfers[:started])
	rep.NotAcknowledged = r.notAcknowledged(p.transfers[:started])
	if srv != nil {
		rep.Kills = srv.server.kills()
	}
	return rep, nil
}

// tempDir is where --crash keeps its database and binary.
func tempDir() (string, error) { return os.MkdirTemp("", "dayreplay-") }
