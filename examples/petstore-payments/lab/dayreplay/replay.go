package dayreplay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/api"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

// replayer plays the clients of every tenant.
type replayer struct {
	base     string
	keys     []string // API key per tenant
	c        Config
	http     *http.Client // idemclient's
	plain    *http.Client // the Independent client's: one attempt a call
	requests atomic.Int64
	retries  atomic.Int64
	gaveUp   atomic.Int64
	// timedOut counts the attempts cut off by their timeout before an
	// answer's headers arrived.
	timedOut atomic.Int64
	// statuses counts the attempts answered, by status code; attempts
	// says how each attempt under a key ended, in order.
	statuses statusCounts
	attempts attemptLog

	mu        sync.Mutex
	accountID [][]string          // per tenant, per planned account
	acked     map[string][]string // transfer key → transfer IDs answered with 201
	answered  map[string]bool     // transfer key → some copy got a final answer
	endings   map[string][]string // transfer key → how each copy ended
	changes   int                 // amount changes sent
	// slowest is the longest a started transfer waited for its first
	// final answer (any copy's), from when its client began it, and
	// slowestKey that transfer's key.
	slowest    time.Duration
	slowestKey string
	// finals holds each answered transfer's time to its first final
	// answer, for the percentiles of the report.
	finals []time.Duration
}

// changeKey marks the context of an amount change, so that its attempts
// are logged apart from those of the transfer whose key it reuses.
type changeKey struct{}

// errRequestBudget stops a client once the day's requests are spent.
var errRequestBudget = fmt.Errorf("the day's request budget is spent: %w", idemclient.ErrPermanent)

func newReplayer(base string, keys []string, c Config) (*replayer, error) {
	r := &replayer{
		base:     base,
		keys:     keys,
		c:        c,
		acked:    map[string][]string{},
		answered: map[string]bool{},
		endings:  map[string][]string{},
	}
	// Without a budget of its own, a client retries until the day ends.
	budget := c.Budget
	if budget == 0 {
		budget = c.Duration
	}
	// The clients are idemclient's: a key per logical request (the plan's,
	// so the audit can find each transfer), the same body on every retry,
	// backoff with jitter, Retry-After honoured, final answers left alone.
	t, err := idemclient.New(idemclient.Config{
		Operations:  api.ClientOperations(),
		Base:        countingTransport{next: &http.Transport{MaxIdleConnsPerHost: 64}, r: r},
		MaxAttempts: c.Attempts,
		Budget:      budget,
		BackoffBase: 50 * time.Millisecond,
		BackoffMax:  time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	r.http = t.Client()
	r.plain = &http.Client{Transport: countingTransport{next: &http.Transport{MaxIdleConnsPerHost: 64}, r: r}}
	return r, nil
}

// countingTransport counts the requests sent and refuses those beyond the
// day's MaxRequests.
type countingTransport struct {
	next http.RoundTripper
	r    *replayer
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.r.requests.Add(1) > t.r.c.MaxRequests {
		t.r.requests.Add(-1)
		return nil, errRequestBudget
	}
	sent := time.Now()
	res, err := t.next.RoundTrip(req)
	ending := "error"
	switch {
	case err != nil && req.Context().Err() != nil:
		t.r.timedOut.Add(1)
		ending = "timeout"
	case err == nil:
		t.r.statuses.add(res.StatusCode)
		ending = strconv.Itoa(res.StatusCode)
		if ra := res.Header.Get("Retry-After"); ra != "" {
			ending += " (Retry-After " + ra + ")"
		}
	}
	key := req.Header.Get("Idempotency-Key")
	if req.Context().Value(changeKey{}) != nil {
		key += "#changed"
	}
	t.r.attempts.add(key, sent, ending)
	return res, err
}

// timeout is one request's deadline: Timeout, or a draw up to TimeoutMax.
func (r *replayer) timeout() time.Duration {
	if r.c.TimeoutMax <= r.c.Timeout {
		return r.c.Timeout
	}
	return r.c.Timeout + rand.N(r.c.TimeoutMax-r.c.Timeout+1)
}

type answer struct {
	status int
	body   []byte
	// attempts counts the requests the client sent for this answer.
	attempts int
	// gaveUp says the client stopped retrying without a final answer:
	// status and body are then those of the last attempt that had one
	// (0 and nil when none had), and err why there was none.
	gaveUp bool
	err    error
}

// String says how a logical request ended: its final status and problem
// type, or why the client gave up.
func (a answer) String() string {
	s := strconv.Itoa(a.status)
	if p := idemclient.ProblemType(a.body); p != "" {
		s += " " + p
	}
	if !a.gaveUp {
		return fmt.Sprintf("%s after %d attempts", s, a.attempts)
	}
	if a.err != nil {
		return fmt.Sprintf("gave up after %d attempts: %v", a.attempts, a.err)
	}
	return fmt.Sprintf("gave up after %d attempts on %s", a.attempts, s)
}

// send makes one logical request under key through the retrying client.
// Each attempt is abandoned after the request's timeout and retried, as a
// real client with a short deadline does. ok is false when the client gave
// up (attempts, its retry budget, the request budget or the day's end); the
// answer then says how far it got.
func (r *replayer) send(ctx context.Context, tenant int, path, key, body string) (answer, bool) {
	if r.c.client() == Independent {
		return r.sendIndependent(ctx, tenant, path, key, body)
	}
	var rep idemclient.Report
	ctx = idemclient.WithReport(idemclient.WithKey(ctx, key), &rep)
	ctx = idemclient.WithAttemptTimeout(ctx, r.timeout())
	a, err := r.post(ctx, tenant, path, body)
	a.attempts = rep.Attempts
	if rep.Attempts > 1 {
		r.retries.Add(int64(rep.Attempts - 1))
	}
	if err != nil || rep.GaveUp {
		r.gaveUp.Add(1)
		a.gaveUp, a.err = true, err
		return a, false
	}
	return a, true
}

func (r *replayer) post(ctx context.Context, tenant int, path, body string) (answer, error) {
	a, _, err := r.postWith(ctx, r.http, tenant, path, body, "")
	return a, err
}

// openAccounts opens every planned account, each under its own key.
func (r *replayer) openAccounts(ctx context.Context, p plan) error {
	r.accountID = make([][]string, len(p.accounts))
	for t, accts := range p.accounts {
		for _, a := range accts {
			body := fmt.Sprintf(`{"owner":%q,"currency":"EUR","initial_balance":%d}`, a.owner, a.initial)
			ans, ok := r.send(ctx, t, "/accounts", a.key, body)
			if !ok || ans.status != http.StatusCreated {
				return fmt.Errorf("open account %s: %d %s", a.owner, ans.status, bytes.TrimSpace(ans.body))
			}
			var acct struct{ ID string }
			if err := json.Unmarshal(ans.body, &acct); err != nil {
				return fmt.Errorf("open account %s: %w", a.owner, err)
			}
			r.accountID[t] = append(r.accountID[t], acct.ID)
		}
	}
	return nil
}

func transferBody(from, to string, amount int64, memo string) string {
	return fmt.Sprintf(`{"from_account":%q,"to_account":%q,"amount":%d,"currency":"EUR","memo":%q}`, from, to, amount, memo)
}

// replay runs the planned transfers with c.Concurrency clients and returns
// how many it handed to a client before ctx ended.
func (r *replayer) replay(ctx context.Context, p plan) int {
	work := make(chan plannedTransfer)
	var wg sync.WaitGroup
	for range r.c.Concurrency {
		wg.Go(func() {
			for tr := range work {
				r.transfer(ctx, tr)
			}
		})
	}
	started := 0
	for _, tr := range p.transfers {
		select {
		case work <- tr:
			started++
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	return started
}

func (r *replayer) transfer(ctx context.Context, tr plannedTransfer) {
	from, to := r.accountID[tr.tenant][tr.from], r.accountID[tr.tenant][tr.to]
	body := transferBody(from, to, tr.amount, tr.key)
	copies := 1
	if tr.twin {
		copies = 2
	}
	var wg sync.WaitGroup
	began := time.Now()
	var first time.Duration // of the first final answer; 0 for none yet
	answered := false
	for range copies {
		wg.Go(func() {
			ans, ok := r.send(ctx, tr.tenant, "/transfers", tr.key, body)
			took := time.Since(began)
			r.mu.Lock()
			r.endings[tr.key] = append(r.endings[tr.key], ans.String())
			if ok && ans.status != http.StatusConflict {
				r.answered[tr.key], answered = true, true
				if first == 0 || took < first {
					first = took
				}
			}
			r.mu.Unlock()
			if ok {
				r.ack(tr.key, ans)
			}
		})
	}
	wg.Wait()
	r.mu.Lock()
	if first > r.slowest {
		r.slowest, r.slowestKey = first, tr.key
	}
	if answered {
		r.finals = append(r.finals, first)
	}
	r.mu.Unlock()
	// Only a key that was answered is known to be used: when every copy
	// gave up, the transfer may never have run, and the same key with
	// another amount is then a first request the server rightly accepts.
	if tr.change && answered && ctx.Err() == nil {
		r.mu.Lock()
		r.changes++
		r.mu.Unlock()
		// The same key, another amount: the server must refuse it. Its memo
		// marks it, so the audit can find it if it was accepted.
		changed := transferBody(from, to, tr.amount+1, tr.key+"#changed")
		cctx := context.WithValue(ctx, changeKey{}, true)
		if ans, ok := r.send(cctx, tr.tenant, "/transfers", tr.key, changed); ok {
			r.ack(tr.key+"#changed", ans)
		}
	}
}

// unanswered counts the transfers of started whose client got no final
// answer.
func (r *replayer) unanswered(started []plannedTransfer) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, tr := range started {
		if !r.answered[tr.key] {
			n++
		}
	}
	return n
}

// notAcknowledged lists the transfers of started that no copy saw
// answered with a 201, each with how every copy of it ended.
func (r *replayer) notAcknowledged(started []plannedTransfer) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, tr := range started {
		if len(r.acked[tr.key]) > 0 {
			continue
		}
		endings := r.endings[tr.key]
		if len(endings) == 0 {
			endings = []string{"never sent"}
		}
		out = append(out, tr.key+": "+strings.Join(endings, "; "))
	}
	return out
}

func (r *replayer) ack(key string, a answer) {
	if a.status != http.StatusCreated {
		return
	}
	var t struct{ ID string }
	if json.Unmarshal(a.body, &t) != nil || t.ID == "" {
		return
	}
	r.mu.Lock()
	r.acked[key] = append(r.acked[key], t.ID)
	r.mu.Unlock()
}

type apiTransfer struct {
	ID          string `json:"id"`
	FromAccount string `json:"from_account"`
	ToAccount   string `json:"to_account"`
	Amount      int64  `json:"amount"`
	Memo        string `json:"memo"`
}

// get reads one resource for the audit. Anything but a 200 is an error: an
// audit of lists it could not read would find nothing wrong in them.
func (r *replayer) get(ctx context.Context, tenant int, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.keys[tenant])
	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("GET %s: %d %s", path, res.StatusCode, bytes.TrimSpace(b))
	}
	return json.NewDecoder(res.Body).Decode(v)
}

// settle waits until the balances stop changing: a client that gave up on
// a request left it running in the server, and on SQLite such requests can
// still be queued for the write lock when the day ends. An audit that read
// while they commit would see a transfer's balances without its row, or the
// reverse. It reads every second, for at most a minute.
func (r *replayer) settle(ctx context.Context, tenants int) error {
	var last string
	for range 60 {
		var now strings.Builder
		for t := range tenants {
			var list struct {
				Accounts []struct {
					ID      string `json:"id"`
					Balance int64  `json:"balance"`
				} `json:"accounts"`
			}
			if err := r.get(ctx, t, "/accounts", &list); err != nil {
				return fmt.Errorf("audit: list accounts: %w", err)
			}
			for _, a := range list.Accounts {
				fmt.Fprintf(&now, "%s=%d,", a.ID, a.Balance)
			}
		}
		if now.String() == last {
			return nil
		}
		last = now.String()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return errors.New("audit: the balances still change a minute after the day's end")
}

// audit reads every account and transfer of the day back over the API,
// and returns the transfers it found by ID.
func (r *replayer) audit(ctx context.Context, p plan) (Report, map[string]apiTransfer, error) {
	var a Report
	a.Conserved = true
	transfers := map[string]apiTransfer{}
	for t := range p.accounts {
		initial := map[string]int64{}
		for _, pa := range p.accounts[t] {
			initial[pa.owner] = pa.initial
		}
		var list struct {
			Accounts []struct {
				ID      string `json:"id"`
				Owner   string `json:"owner"`
				Balance int64  `json:"balance"`
			} `json:"accounts"`
		}
		if err := r.get(ctx, t, "/accounts", &list); err != nil {
			return a, nil, fmt.Errorf("audit: list accounts: %w", err)
		}
		var sumBalance, sumInitial int64
		listed := map[string]bool{}
		for _, acct := range list.Accounts {
			init, ours := initial[acct.Owner]
			if !ours {
				continue
			}
			listed[acct.ID] = true
			sumBalance += acct.Balance
			sumInitial += init
			var tl struct {
				Transfers []apiTransfer `json:"transfers"`
			}
			if err := r.get(ctx, t, "/accounts/"+url.PathEscape(acct.ID)+"/transfers", &tl); err != nil {
				return a, nil, fmt.Errorf("audit: list transfers: %w", err)
			}
			want := init
			for _, tr := range tl.Transfers {
				transfers[tr.ID] = tr
				if tr.FromAccount == acct.ID {
					want -= tr.Amount
				}
				if tr.ToAccount == acct.ID {
					want += tr.Amount
				}
			}
			if want != acct.Balance {
				a.Conserved = false
				a.Problems = append(a.Problems, fmt.Sprintf("account %s holds %d, its transfers say %d", acct.ID, acct.Balance, want))
			}
		}
		for _, id := range r.accountID[t] {
			if !listed[id] {
				a.Conserved = false
				a.Problems = append(a.Problems, fmt.Sprintf("opened account %s is missing", id))
			}
		}
		if sumBalance != sumInitial {
			a.Conserved = false
			a.Problems = append(a.Problems, fmt.Sprintf("tenant %d holds %d in total, opened with %d", t, sumBalance, sumInitial))
		}
	}
	byMemo := map[string]int{}
	for _, tr := range transfers {
		byMemo[tr.Memo]++
	}
	for _, tr := range p.transfers {
		if n := byMemo[tr.key]; n > 1 {
			a.Duplicates += n - 1
		}
		if byMemo[tr.key+"#changed"] > 0 {
			a.WronglyAccepted++
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a.Requests, a.Retries, a.GaveUp = r.requests.Load(), r.retries.Load(), r.gaveUp.Load()
	a.TimedOut, a.Slowest = r.timedOut.Load(), r.slowest
	a.P50, a.P99 = percentile(r.finals, 50), percentile(r.finals, 99)
	if r.slowestKey != "" {
		a.SlowestEndings = r.slowestKey + ": " + strings.Join(r.endings[r.slowestKey], "; ") +
			"; attempts: " + r.attempts.of(r.slowestKey)
	}
	a.Statuses = r.statuses.String()
	a.Unexpected = r.attempts.unexpected()
	a.AmountChanges = r.changes
	seen := map[string]bool{}
	for _, ids := range r.acked {
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			a.Acknowledged++
			if _, ok := transfers[id]; !ok {
				a.Lost++
				a.Problems = append(a.Problems, "acknowledged transfer "+id+" is missing")
			}
		}
	}
	return a, transfers, nil
}

// percentile is the p-th percentile (nearest rank) of ds, which it
// sorts; zero when ds is empty.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := (p*len(ds) + 99) / 100
	return ds[max(rank, 1)-1]
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// WriteTable writes the report as a Markdown table, followed by its
// problems, one a line.
func (a Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	row := func(k string, v any) { fmt.Fprintf(tw, "| %s\t %v\t\n", k, v) }
	row("metric", "value")
	fmt.Fprintf(tw, "|---\t---\t\n")
	row("client", a.Client)
	row("transfers planned", a.Planned)
	row("transfers started", a.Started)
	row("requests", a.Requests)
	row("retries", a.Retries)
	row("requests given up", a.GaveUp)
	row("attempts timed out", fmt.Sprintf("%d of %d", a.TimedOut, a.Requests))
	row("attempts answered, by status", a.Statuses)
	row("server kills", a.Kills)
	if a.Effects != nil {
		row("processor kills", a.ProcessorKills)
	}
	row("transfers acknowledged (201)", a.Acknowledged)
	row("transfers without a final answer", a.Unanswered)
	row("duplicate transfers", a.Duplicates)
	row("lost transfers (201 but missing)", a.Lost)
	row("wrongly-accepted amount changes", fmt.Sprintf("%d of %d", a.WronglyAccepted, a.AmountChanges))
	row("money conserved", yesNo(a.Conserved))
	row("time to a final answer, median and 99th percentile", fmt.Sprintf("%v, %v", a.P50.Round(10*time.Millisecond), a.P99.Round(10*time.Millisecond)))
	row("slowest time to a final answer", a.Slowest.Round(10*time.Millisecond))
	row("slowest transfer", a.SlowestEndings)
	a.Effects.rows(row)
	row("elapsed", a.Elapsed.Round(100*time.Millisecond))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the table: %w", err)
	}
	for _, d := range a.Problems {
		if _, err := fmt.Fprintln(w, "  ", d); err != nil {
			return fmt.Errorf("write the table: %w", err)
		}
	}
	if len(a.Unexpected) > 0 {
		if _, err := fmt.Fprintln(w, "transfers whose attempts met a status other than 201, 409 and 503, with every attempt:"); err != nil {
			return fmt.Errorf("write the table: %w", err)
		}
		for _, d := range a.Unexpected {
			if _, err := fmt.Fprintln(w, "  ", d); err != nil {
				return fmt.Errorf("write the table: %w", err)
			}
		}
	}
	if len(a.NotAcknowledged) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "transfers not acknowledged, with how each copy ended:"); err != nil {
		return fmt.Errorf("write the table: %w", err)
	}
	for _, d := range a.NotAcknowledged {
		if _, err := fmt.Fprintln(w, "  ", d); err != nil {
			return fmt.Errorf("write the table: %w", err)
		}
	}
	return nil
}
