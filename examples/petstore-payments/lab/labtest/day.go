package labtest

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
	// DayChaosDelay is the lab server's --chaos-delay for the small day.
	DayChaosDelay = "250ms"
)

// SmallDay is the day's configuration against base (ignored with Crash).
func SmallDay(t *testing.T, base string) dayreplay.Config {
	c := dayreplay.DefaultConfig()
	c.URL = base
	c.APIKeys = APIKeys
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

// PlayDay runs the day and logs its table; the caller judges the report.
func PlayDay(t *testing.T, c dayreplay.Config) dayreplay.Report {
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

// CheckSafe asserts what idempotency promises: no transfer twice, none
// acknowledged and then missing, no amount change accepted under a used
// key, and every transfer not given up acknowledged.
func CheckSafe(t *testing.T, rep dayreplay.Report) {
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
