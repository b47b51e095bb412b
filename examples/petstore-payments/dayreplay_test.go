package main_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
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
		s := startLab(t, postgresURL(t), "--chaos-delay", dayChaosDelay)
		rep := playDay(t, smallDay(t, s.URL))
		// Without retries the zeros below would prove nothing.
		if rep.Retries == 0 {
			t.Errorf("no request was retried; the day did not exercise idempotency")
		}
		checkSafe(t, rep)
	})

	t.Run("PostgresOff", func(t *testing.T) {
		t.Parallel()
		s := startLab(t, postgresURL(t), "--chaos-delay", dayChaosDelay, "--idempotency=off")
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
		s := startLab(t, sqliteURL(t), "--chaos-delay", dayChaosDelay)
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
		c.ServerBin = labBinary
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
