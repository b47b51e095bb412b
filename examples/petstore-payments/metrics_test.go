package main_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// requestsTotal matches one series of idem_requests_total in the
// Prometheus text format.
var requestsTotal = regexp.MustCompile(`(?m)^idem_requests_total\{operation="([^"]+)",outcome="([^"]+)"\} (\S+)$`)

// scrapeOutcomes reads /metrics and returns idem_requests_total by
// operation and outcome.
func scrapeOutcomes(t *testing.T, s *labtest.Server) map[string]map[string]int64 {
	t.Helper()
	r := labtest.NewClient(t, s, "").Expect(200, "GET", "/metrics", "", "")
	out := map[string]map[string]int64{}
	for _, m := range requestsTotal.FindAllStringSubmatch(string(r.Body), -1) {
		n, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("idem_requests_total %s/%s: %v", m[1], m[2], err)
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]int64{}
		}
		out[m[1]][m[2]] = int64(n)
	}
	if len(out) == 0 {
		t.Fatalf("/metrics has no idem_requests_total:\n%s", r.Body)
	}
	return out
}

// TestMetricsAfterDay plays a small day against a server with --metrics
// and checks that /metrics counts what the day's audit says happened.
func TestMetricsAfterDay(t *testing.T) {
	t.Parallel()
	for _, db := range labtest.Databases() {
		t.Run(db.Name, func(t *testing.T) {
			t.Parallel()
			s := bins.StartLab(t, db.URL(t), "--chaos-delay", labtest.DayChaosDelay, "--metrics")
			c := labtest.SmallDay(t, s.URL)
			if db.Name == "SQLite" {
				// As in TestDayReplay: SQLite's one writer queues the
				// requests, so fewer clients with more patience.
				c.Timeout = dayreplay.DefaultConfig().Timeout
				c.Concurrency = 2
			}
			rep := labtest.PlayDay(t, c)
			labtest.CheckSafe(t, rep)
			if rep.Retries == 0 {
				t.Fatalf("no request was retried; the day did not exercise idempotency")
			}
			checkOutcomes(t, scrapeOutcomes(t, s), admissionRefused(t, s), rep, c)
		})
	}
}

// admissionRefused sums petstore_admission_refused_total over its reasons:
// the requests admission answered before the engine saw them.
func admissionRefused(t *testing.T, s *labtest.Server) int64 {
	t.Helper()
	var n int64
	for _, reason := range []string{"full", "waited", "gone", "displaced", "read-ahead-full"} {
		v := s.Metric(t, `petstore_admission_refused_total{reason="`+reason+`"}`)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("petstore_admission_refused_total{reason=%q} = %q: %v", reason, v, err)
		}
		n += int64(f)
	}
	return n
}

// checkOutcomes compares the engine's counts, and the requests admission
// refused before the engine, with the audit of a day played without kills.
func checkOutcomes(t *testing.T, got map[string]map[string]int64, refused int64, rep dayreplay.Report, c dayreplay.Config) {
	t.Helper()
	t.Logf("idem_requests_total: %v", got)
	var all int64
	for _, byOutcome := range got {
		for _, n := range byOutcome {
			all += n
		}
	}
	// Every request the clients sent reached the engine once, unless
	// admission refused it first (a client that left while it waited for
	// a slot, on a loaded machine): without kills, a request a client gave
	// up on is still read and answered (to no one), and the day sends
	// nothing unprotected.
	if all+refused != rep.Requests {
		t.Errorf("the engine counted %d requests and admission refused %d, the clients sent %d", all, refused, rep.Requests)
	}
	// Each account is opened under its own key, once, however often its
	// opening was retried; the day's two tenants (apiKeys) open
	// c.Accounts each.
	if n, want := got["createAccount"]["executed"], int64(2*c.Accounts); n != want {
		t.Errorf("createAccount executed %d times, want %d: one per account", n, want)
	}
	tr := got["createTransfer"]
	// Every acknowledged transfer ran its handler once, and no transfer's
	// key ran it twice.
	if ran := tr["executed"] + tr["takeover"]; ran < int64(rep.Acknowledged) || ran > int64(rep.Started) {
		t.Errorf("createTransfer ran its handler %d times; %d transfers were acknowledged and %d started", ran, rep.Acknowledged, rep.Started)
	}
	// The retries of requests that had run met their stored answers.
	if tr["replayed"] == 0 {
		t.Errorf("no createTransfer replayed after %d retries", rep.Retries)
	}
	// Every amount change under a used key was refused.
	if tr["mismatch"] < int64(rep.AmountChanges) {
		t.Errorf("%d createTransfer mismatches, but %d amount changes were refused", tr["mismatch"], rep.AmountChanges)
	}
}
