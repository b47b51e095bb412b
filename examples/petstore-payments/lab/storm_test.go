package lab_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// The storm's clients: 16 of them, whose patience runs out after 30 to
// 80 ms, each transfer retried for up to 90 s, against a server that
// pauses up to 100 ms after its writes. Most attempts time out while the
// handler pauses, and every retry meets the key in flight or its replay:
// the day in which work for clients that are gone would pile up. Every
// transfer must get its final answer, on SQLite as on PostgreSQL, with and
// without kills. The full-size days that play it at 300 and 3,000
// transfers take minutes and run with the build tag soak (soak_test.go);
// TestShortStorm plays it at a size that takes seconds.
const (
	stormConcurrency = 16
	stormTimeoutMin  = 30 * time.Millisecond
	stormTimeoutMax  = 80 * time.Millisecond
	stormBudget      = 90 * time.Second
	stormChaosDelay  = "100ms"
)

// stormDay is the storm's configuration against base (ignored with
// Crash) for a day of transfers by clients of the client policy, which
// must end within duration.
func stormDay(t *testing.T, client dayreplay.Client, base string, transfers int, duration time.Duration) dayreplay.Config {
	c := labtest.SmallDay(t, base)
	c.Client = client
	c.Transfers = transfers
	c.Concurrency = stormConcurrency
	c.Timeout, c.TimeoutMax = stormTimeoutMin, stormTimeoutMax
	c.Budget = stormBudget
	// The budget, not a count, ends a client's retries.
	c.Attempts = math.MaxInt32
	c.MaxRequests = math.MaxInt64
	c.Duration = duration
	return c
}

// stormProcessorDelay is the fake processor's pause before each charge
// and receipt, so that kills land mid-call.
const stormProcessorDelay = "10ms"

// stormCrash is stormDay played by a server on databaseURL that charges
// each transfer at the fake processor, a process of its own, and sends its
// receipt through the outbox to the processor's receiver: kills times,
// every killEvery on average, the server, the processor or both are killed
// (dayreplay.KillTargets).
func stormCrash(t *testing.T, client dayreplay.Client, databaseURL string, transfers int, duration, killEvery time.Duration, kills int) dayreplay.Config {
	c := stormDay(t, client, "", transfers, duration)
	c.Crash = true
	c.ServerBin = bins.Lab
	c.DatabaseURL = databaseURL
	c.ServerArgs = []string{"--chaos-delay=" + stormChaosDelay}
	c.KillEvery = killEvery
	c.MaxKills = kills
	c.Processor = true
	c.ProcessorBin = bins.Processor
	c.ProcessorArgs = []string{"--delay=" + stormProcessorDelay}
	return c
}

// checkAnswered is labtest.CheckSafe plus the storm's promise: no client gave up,
// and every transfer got a final answer.
func checkAnswered(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	labtest.CheckSafe(t, rep)
	if rep.Unanswered != 0 || rep.GaveUp != 0 {
		t.Errorf("%d of %d transfers got no final answer (%d requests given up), want 0", rep.Unanswered, rep.Started, rep.GaveUp)
	}
	if rep.Retries == 0 {
		t.Errorf("no request was retried; the day did not exercise idempotency")
	}
}

// checkKills fails t unless the kills of a stormCrash day were kills:
// the server's and the processor's as dayreplay.KillTargets says.
func checkKills(t *testing.T, rep dayreplay.Report, kills int) {
	t.Helper()
	server, processor := dayreplay.KillTargets(kills)
	if rep.Kills != server || rep.ProcessorKills != processor {
		t.Errorf("%d kills of the server and %d of the processor, want %d and %d", rep.Kills, rep.ProcessorKills, server, processor)
	}
}

// maxReceiptsPerKill bounds the duplicate receipts one kill may cause:
// the deliveries the server's runner has under way, at most its workers
// (idemoutbox's default, 4), each made again because the kill came
// between the receiver keeping it and the runner recording it. A kill of
// the server leaves the delivery unrecorded until its lease ends; a kill
// of the receiver (the processor) after it kept a receipt and before it
// answered makes the attempt fail, and it is tried again. On SQLite the
// record waits for the write lock behind the transfers, for seconds in a
// storm, so a kill of the server often finds all four there.
const maxReceiptsPerKill = 4

// checkEffects asserts what a stormCrash day promises outside the
// database: one charge per transfer at the processor, no receipt for a
// transfer that did not commit, a receipt for every one that did, and
// duplicate receipts only from kills and failed records, each with the
// first's key.
func checkEffects(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	e := rep.Effects
	if e == nil {
		t.Fatal("the day audited no charges and receipts")
	}
	t.Logf("charges %d, duplicate charges %d, charged but never committed %d; receipts %d, for uncommitted transfers %d, committed without one %d, duplicates %d (%d with the first's key) after %d kills of the server and %d deliveries it could not record",
		e.Charges, e.DuplicateCharges, e.ChargedNotCommitted, e.Receipts, e.ReceiptsNotCommitted, e.Undelivered, e.DuplicateReceipts, e.DuplicateSameKey, rep.Kills, e.Unrecorded)
	if e.Charges == 0 || e.Receipts == 0 {
		t.Errorf("%d charges and %d receipts: the day did not charge or send receipts", e.Charges, e.Receipts)
	}
	if e.DuplicateCharges != 0 {
		t.Errorf("%d duplicate charges at the processor, want 0", e.DuplicateCharges)
	}
	if e.ReceiptsNotCommitted != 0 {
		t.Errorf("%d receipts for transfers that never committed, want 0", e.ReceiptsNotCommitted)
	}
	if e.Undelivered != 0 {
		t.Errorf("%d committed transfers have no receipt %v after the day, want 0", e.Undelivered, e.Wait.Round(time.Second))
	}
	// A duplicate needs a delivery and no record of it: a kill between
	// the two, or a record that failed, which the server logs.
	kills := rep.Kills + rep.ProcessorKills
	if most := maxReceiptsPerKill*kills + e.Unrecorded; e.DuplicateReceipts > most || e.DuplicateSameKey != e.DuplicateReceipts {
		t.Errorf("%d duplicate receipts, %d of them with the first's key, after %d kills and %d deliveries not recorded; want at most %d, all with the first's key",
			e.DuplicateReceipts, e.DuplicateSameKey, kills, e.Unrecorded, most)
	}
}

// reportStorm logs the storm's figures and checks its promise: every
// transfer got its final answer, and every one was acknowledged.
func reportStorm(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	share := 0.0
	if rep.Requests > 0 {
		share = float64(rep.TimedOut) / float64(rep.Requests)
	}
	t.Logf("%s clients: slowest time to a final answer %v, 99th percentile %v; %d of %d attempts timed out (%.0f%%); answers %s",
		rep.Client, rep.Slowest.Round(10*time.Millisecond), rep.P99.Round(10*time.Millisecond), rep.TimedOut, rep.Requests, 100*share, rep.Statuses)
	checkAnswered(t, rep)
	if int64(rep.Acknowledged) != int64(rep.Started) {
		t.Errorf("%d of %d transfers acknowledged; not acknowledged:\n%s",
			rep.Acknowledged, rep.Started, strings.Join(rep.NotAcknowledged, "\n"))
	}
}

// playStorm plays a storm of transfers against a server on databaseURL
// with --metrics and flags, and logs the server's count of handler runs
// for clients that had already hung up: admission and the idempotency
// layer refuse those requests before they start. It returns the day's
// report and the server, still running.
func playStorm(t *testing.T, client dayreplay.Client, databaseURL string, transfers int, duration time.Duration, flags ...string) (dayreplay.Report, *labtest.Server) {
	s := bins.StartLab(t, databaseURL, append([]string{"--chaos-delay", stormChaosDelay, "--metrics"}, flags...)...)
	rep := labtest.PlayDay(t, stormDay(t, client, s.URL, transfers, duration))
	reportStorm(t, rep)
	t.Logf("handler runs for clients that had hung up: %s; admission refusals full %s, waited %s, gone %s, displaced %s",
		s.Metric(t, "petstore_handler_runs_client_gone_total"),
		s.Metric(t, `petstore_admission_refused_total{reason="full"}`),
		s.Metric(t, `petstore_admission_refused_total{reason="waited"}`),
		s.Metric(t, `petstore_admission_refused_total{reason="gone"}`),
		s.Metric(t, `petstore_admission_refused_total{reason="displaced"}`))
	checkQuietLogs(t, s.Logs())
	return rep, s
}

// checkQuietLogs fails t if a storm of ordinary client timeouts, without
// kills, made the server log a warning or an error: each one in
// docs/runtime.md asks an operator to act, and nothing here needs it.
func checkQuietLogs(t *testing.T, logs string) {
	t.Helper()
	for _, level := range []string{"WARN", "ERROR"} {
		if lines := labtest.LevelCounts(logs, level); len(lines) > 0 {
			t.Errorf("the server logged at %s in a storm without kills: %s; the first such line:\n%s",
				level, strings.Join(lines, "; "), firstAt(logs, level))
		}
	}
}

// firstAt is the first line of logs at level.
func firstAt(logs, level string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, " level="+level+" ") {
			return line
		}
	}
	return ""
}

// playStorms plays a storm of transfers on each database, by the clients
// of each policy (dayreplay.Clients), without kills and with kills, one
// every killEvery on average; each day must end within duration.
func playStorms(t *testing.T, transfers int, duration, killEvery time.Duration, kills int) {
	for _, client := range dayreplay.Clients {
		t.Run(string(client), func(t *testing.T) {
			t.Parallel()
			for _, db := range labtest.Databases() {
				t.Run(db.Name, func(t *testing.T) {
					t.Parallel()
					playStorm(t, client, db.URL(t), transfers, duration)
				})
				t.Run(db.Name+"Crash", func(t *testing.T) {
					t.Parallel()
					rep := labtest.PlayDay(t, stormCrash(t, client, db.URL(t), transfers, duration, killEvery, kills))
					checkKills(t, rep, kills)
					reportStorm(t, rep)
					checkEffects(t, rep)
				})
			}
		})
	}
}

// TestShortStorm plays the storm at 60 transfers, which takes seconds, on
// each database, by the clients of each policy, without kills and with
// three: of the server, of the processor, and of both at once. It checks what the full-size days of the
// soak build (TestStormDay, TestFullDay) check at scale, on every run.
func TestShortStorm(t *testing.T) {
	t.Parallel()
	// The day is over in a few seconds on PostgreSQL: the three kills
	// come close enough together to land within it.
	playStorms(t, 60, 2*time.Minute, 400*time.Millisecond, 3)
}
