//go:build soak

package lab_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/dayreplay"
	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// stormLevers are the server's settings that TestSQLiteStormLevers
// compares, each a name and the lab server's flags besides the storm's.
var stormLevers = []struct {
	name string
	args []string
}{
	{"none", nil},
	{"duplicate wait 100ms", []string{"--duplicate-wait", "100ms"}},
}

// TestSQLiteStormLevers plays the storm of 300 transfers on SQLite,
// where one writer holds the lock through each transfer's pause, against
// a lab server with each of stormLevers in turn, by the clients of each
// policy, and logs one line per day: the slowest final answer and the
// 99th percentile, the attempts and how many timed out, and the handler
// runs for clients that had hung up. The days run one at a time, in an
// order that alternates from round to round, so that a change in the
// machine's load falls on every lever alike; IDEMGEN_LEVER_ROUNDS sets the
// rounds (2).
//
//	go test -tags soak -count=1 -v -run '^TestSQLiteStormLevers$' -timeout 30m ./examples/petstore-payments/lab
func TestSQLiteStormLevers(t *testing.T) {
	rounds := 2
	if v := os.Getenv("IDEMGEN_LEVER_ROUNDS"); v != "" {
		if _, err := fmt.Sscan(v, &rounds); err != nil {
			t.Fatalf("IDEMGEN_LEVER_ROUNDS=%q: %v", v, err)
		}
	}
	var lines []string
	for round := range rounds {
		order := slices.Clone(stormLevers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, client := range dayreplay.Clients {
			for _, l := range order {
				t.Run(fmt.Sprintf("%d/%s/%s", round, client, l.name), func(t *testing.T) {
					load := loadAverage()
					rep, s := playStorm(t, client, labtest.SQLiteURL(t), stormLeverTransfers, 3*time.Minute, l.args...)
					lines = append(lines, fmt.Sprintf("| %d | %s | %s | %v | %v | %d of %d | %s | %s | %v | %s–%s |",
						round, client, l.name, rep.Slowest.Round(10*time.Millisecond), rep.P99.Round(10*time.Millisecond),
						rep.TimedOut, rep.Requests, rep.Statuses, s.Metric(t, "petstore_handler_runs_client_gone_total"),
						rep.Elapsed.Round(100*time.Millisecond), load, loadAverage()))
				})
			}
		}
	}
	t.Logf("round | client | lever | slowest | p99 | attempts timed out | answers | handler runs, client gone | day over in | load\n%s", strings.Join(lines, "\n"))
}

// stormLeverTransfers is the size of TestSQLiteStormLevers's days.
const stormLeverTransfers = 300

// loadAverage is the machine's one-minute load average, "?" where it
// cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
