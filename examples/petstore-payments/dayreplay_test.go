package main_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/internal/dayreplay"
)

// The small day every subtest plays. Seed 5 plans three double-sent
// transfers and three amount changes among its 48 transfers, so that each
// audit row has something to count. The client gives up on a request
// after 150 ms while the server pauses up to 250 ms after its writes, so
// that on PostgreSQL a large share of the requests time out after the money
// has moved and are retried: without idempotency, scores of duplicates in
// 48 transfers, far from the zero on which that subtest fails.
const (
	daySeed        = 5
	dayTransfers   = 48
	dayConcurrency = 4
	dayTimeout     = 150 * time.Millisecond
	dayChaosDelay  = "250ms"
)

// smallDay is the day's configuration against base (ignored with Crash).
func smallDay(t *testing.T, base string) dayreplay.Config {
	c := dayreplay.DefaultConfig()
	c.URL = base
	c.APIKeys = apiKeys
	c.Seed = daySeed
	c.Transfers = dayTransfers
	c.Concurrency = dayConcurrency
	c.Timeout = dayTimeout
	// Far beyond what the day takes, so that a day cut short is a failure
	// rather than a smaller day.
	c.Duration = 80 * time.Second
	c.Log = logWriter{t}
	return c
}

// logWriter sends the replay's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// playDay runs the day and logs its table; the caller judges the report.
func playDay(t *testing.T, c dayreplay.Config) dayreplay.Report {
	t.Helper()
	rep, err := dayreplay.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("the day could not be played: %v", err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("the day's audit:\n%s", table.String())
	if rep.Started != rep.Planned {
		t.Errorf("only %d of %d transfers were started before the day's end", rep.Started, rep.Planned)
	}
	if rep.AmountChanges == 0 {
		t.Errorf("no amount change was sent; the plan of seed %d has some", daySeed)
	}
	return rep
}

// checkSafe asserts what idempotency promises: no transfer twice, none
// acknowledged and then missing, no amount change accepted under a used
// key, and every transfer not given up acknowledged.
func checkSafe(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicate transfers, want 0", rep.Duplicates)
	}
	if rep.Lost != 0 {
		t.Errorf("%d acknowledged transfers are missing, want 0", rep.Lost)
	}
	if rep.WronglyAccepted != 0 {
		t.Errorf("%d of %d amount changes under a used key were accepted, want 0", rep.WronglyAccepted, rep.AmountChanges)
	}
	if !rep.Conserved {
		t.Errorf("money was not conserved: %s", strings.Join(rep.Problems, "; "))
	}
	if int64(rep.Acknowledged) < int64(rep.Started)-rep.GaveUp {
		t.Errorf("%d transfers acknowledged; %d started and %d requests given up leave at least %d; not acknowledged:\n%s",
			rep.Acknowledged, rep.Started, rep.GaveUp, int64(rep.Started)-rep.GaveUp, strings.Join(rep.NotAcknowledged, "\n"))
	}
}

// TestDayReplay plays a small day of timing-out, retrying, double-sending
// clients against real server processes on PostgreSQL, and audits it.
func TestDayReplay(t *testing.T) {
	t.Parallel()

	t.Run("PostgresOn", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, postgresURL(t), "--chaos-delay", dayChaosDelay)
		rep := playDay(t, smallDay(t, s.URL))
		// Without retries the zeros below would prove nothing.
		if rep.Retries == 0 {
			t.Errorf("no request was retried; the day did not exercise idempotency")
		}
		checkSafe(t, rep)
	})

	t.Run("PostgresOff", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, postgresURL(t), "--chaos-delay", dayChaosDelay, "--idempotency=off")
		rep := playDay(t, smallDay(t, s.URL))
		// The same day without the layer must show the damage, or the
		// audit of the other subtests could be blind to it.
		if rep.Duplicates == 0 {
			t.Errorf("no duplicate transfer without idempotency (%d retries); the audit cannot see duplicates or the day does not provoke them", rep.Retries)
		}
		if rep.WronglyAccepted == 0 {
			t.Errorf("no amount change accepted without idempotency (0 of %d)", rep.AmountChanges)
		}
		if rep.Lost != 0 {
			t.Errorf("%d acknowledged transfers are missing, want 0", rep.Lost)
		}
		if !rep.Conserved {
			t.Errorf("money was not conserved: %s", strings.Join(rep.Problems, "; "))
		}
	})

	// SQLite runs one writer at a time, through the pause too: requests
	// queue behind each other, and with the short timeout and four clients
	// of the other subtests the retries would crowd out the day. With two
	// clients and the default timeout, the wait behind the other client's
	// pause still makes requests time out. It needs no PostgreSQL.
	t.Run("SQLiteOn", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, sqliteURL(t), "--chaos-delay", dayChaosDelay)
		c := smallDay(t, s.URL)
		c.Timeout = dayreplay.DefaultConfig().Timeout
		c.Concurrency = 2
		rep := playDay(t, c)
		if rep.Retries == 0 {
			t.Errorf("no request was retried; the day did not exercise idempotency")
		}
		checkSafe(t, rep)
	})

	t.Run("PostgresCrash", func(t *testing.T) {
		t.Parallel()
		c := smallDay(t, "")
		c.Crash = true
		c.ServerBin = serverBinary
		c.DatabaseURL = postgresURL(t)
		c.ServerArgs = []string{"--chaos-delay=" + dayChaosDelay}
		c.KillEvery = time.Second
		rep := playDay(t, c)
		if rep.Kills == 0 {
			t.Errorf("the server was never killed; the day did not test crashes")
		}
		checkSafe(t, rep)
	})
}

// The full-size day: 3,000 transfers from 16 clients whose patience runs
// out after 30 to 80 ms, against a server that pauses up to 100 ms after
// its writes, each transfer retried for up to 90 s. Every transfer must get
// its final answer, on SQLite as on PostgreSQL, with and without kills.
const (
	fullTransfers   = 3000
	fullConcurrency = 16
	fullTimeoutMin  = 30 * time.Millisecond
	fullTimeoutMax  = 80 * time.Millisecond
	fullBudget      = 90 * time.Second
	fullChaosDelay  = "100ms"
	fullKills       = 10
)

// fullDay is the full-size day's configuration against base (ignored with
// Crash).
func fullDay(t *testing.T, base string) dayreplay.Config {
	c := smallDay(t, base)
	c.Transfers = fullTransfers
	c.Concurrency = fullConcurrency
	c.Timeout, c.TimeoutMax = fullTimeoutMin, fullTimeoutMax
	c.Budget = fullBudget
	// The budget, not a count, ends a client's retries.
	c.Attempts = math.MaxInt32
	c.MaxRequests = math.MaxInt64
	// Long enough for SQLite's one writer to hold its lock through 3,000
	// pauses of 50 ms on average, short enough to fail within go test's
	// default ten minutes when transfers stall.
	c.Duration = 6 * time.Minute
	return c
}

// checkAnswered is checkSafe plus the full-size day's promise: no client
// gave up, and every transfer got a final answer.
func checkAnswered(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	checkSafe(t, rep)
	if rep.Unanswered != 0 || rep.GaveUp != 0 {
		t.Errorf("%d of %d transfers got no final answer (%d requests given up), want 0", rep.Unanswered, rep.Started, rep.GaveUp)
	}
	if rep.Retries == 0 {
		t.Errorf("no request was retried; the day did not exercise idempotency")
	}
}

// TestFullDay plays the full-size day against real server processes.
func TestFullDay(t *testing.T) {
	if testing.Short() {
		t.Skip("the full-size day takes minutes; it runs without -short")
	}
	t.Parallel()
	crash := func(t *testing.T, databaseURL string) dayreplay.Config {
		c := fullDay(t, "")
		c.Crash = true
		c.ServerBin = serverBinary
		c.DatabaseURL = databaseURL
		c.ServerArgs = []string{"--chaos-delay=" + fullChaosDelay}
		c.KillEvery = 5 * time.Second
		c.MaxKills = fullKills
		return c
	}
	checkKills := func(t *testing.T, rep dayreplay.Report) {
		if rep.Kills != fullKills {
			t.Errorf("%d kills, want %d", rep.Kills, fullKills)
		}
	}

	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, db.url(t), "--chaos-delay", fullChaosDelay)
			checkAnswered(t, playDay(t, fullDay(t, s.URL)))
		})
		t.Run(db.name+"Crash", func(t *testing.T) {
			t.Parallel()
			rep := playDay(t, crash(t, db.url(t)))
			checkKills(t, rep)
			checkAnswered(t, rep)
		})
	}
}

// The storm: the full-size day's clients (patience of 30 to 80 ms, retries
// for up to 90 s) against the same pause, at a size that runs in well under
// a minute or two per database. It is the day in which work for clients
// that are gone would pile up: most attempts time out while the handler
// pauses, and every retry meets the key in flight or its replay.
const (
	stormTransfers = 300
	stormKills     = 3
)

// stormDay is the storm's configuration against base (ignored with Crash).
func stormDay(t *testing.T, base string) dayreplay.Config {
	c := fullDay(t, base)
	c.Transfers = stormTransfers
	c.Duration = 3 * time.Minute
	return c
}

// reportStorm logs the storm's figures and checks its promise: every
// transfer got its final answer, and no client gave up.
func reportStorm(t *testing.T, rep dayreplay.Report) {
	t.Helper()
	share := 0.0
	if rep.Requests > 0 {
		share = float64(rep.TimedOut) / float64(rep.Requests)
	}
	t.Logf("slowest time to a final answer %v; %d of %d attempts timed out (%.0f%%)",
		rep.Slowest.Round(10*time.Millisecond), rep.TimedOut, rep.Requests, 100*share)
	checkAnswered(t, rep)
	if int64(rep.Acknowledged) != int64(rep.Started) {
		t.Errorf("%d of %d transfers acknowledged; not acknowledged:\n%s",
			rep.Acknowledged, rep.Started, strings.Join(rep.NotAcknowledged, "\n"))
	}
}

// TestStormDay plays the storm on each database, with and without kills.
// Without kills it also reads the server's count of handler runs for
// clients that had already hung up: admission and the idempotency layer
// refuse those requests before they start.
func TestStormDay(t *testing.T) {
	t.Parallel()
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, db.url(t), "--chaos-delay", fullChaosDelay, "--metrics")
			rep := playDay(t, stormDay(t, s.URL))
			reportStorm(t, rep)
			t.Logf("handler runs for clients that had hung up: %s; admission refusals full %s, waited %s, gone %s",
				metric(t, s, "petstore_handler_runs_client_gone_total"),
				metric(t, s, `petstore_admission_refused_total{reason="full"}`),
				metric(t, s, `petstore_admission_refused_total{reason="waited"}`),
				metric(t, s, `petstore_admission_refused_total{reason="gone"}`))
		})
		t.Run(db.name+"Crash", func(t *testing.T) {
			t.Parallel()
			c := stormDay(t, "")
			c.Crash = true
			c.ServerBin = serverBinary
			c.DatabaseURL = db.url(t)
			c.ServerArgs = []string{"--chaos-delay=" + fullChaosDelay}
			c.KillEvery = 2 * time.Second
			c.MaxKills = stormKills
			rep := playDay(t, c)
			if rep.Kills != stormKills {
				t.Errorf("%d kills, want %d", rep.Kills, stormKills)
			}
			reportStorm(t, rep)
		})
	}
}
