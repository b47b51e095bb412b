package lab_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
)

// cpuMeter reads how much CPU time one side of the benchmark has used so
// far: the server process (every thread) and the PostgreSQL backends that
// serve it, told apart from the other sides' by the application_name its
// connections carry. Throughput says which side is faster; the meter says
// where a side's time goes, Go or the database, per request. It reads
// Linux's per-task scheduler statistics (nanoseconds on a CPU), so it
// reports nothing elsewhere.
type cpuMeter struct {
	// admin lists the side's backends; it is not one of them.
	admin *pgx.Conn
	app   string
	pid   int
}

// cpuUse is the CPU time a side used: by its server and by the database
// for it.
type cpuUse struct{ server, database time.Duration }

// sub is u - v.
func (u cpuUse) sub(v cpuUse) cpuUse {
	return cpuUse{u.server - v.server, u.database - v.database}
}

// withApplicationName returns dbURL with the connections' application_name
// set to app.
func withApplicationName(b *testing.B, dbURL, app string) string {
	b.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// newCPUMeter meters the server s, whose connections to the database at
// dbURL carry app, or returns nil when this system has no per-task
// scheduler statistics.
func newCPUMeter(b *testing.B, dbURL, app string, s *labtest.Server) *cpuMeter {
	b.Helper()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		b.Logf("no per-task CPU statistics here (%v); CPU time is not reported", err)
		return nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(ctx) })
	return &cpuMeter{admin: conn, app: app, pid: s.Pid()}
}

// read returns the CPU time used so far by the server and by the backends
// connected now. A backend that closed since the last read takes its time
// with it; the servers' pools keep theirs open through a round.
func (m *cpuMeter) read(b *testing.B) cpuUse {
	b.Helper()
	if m == nil {
		return cpuUse{}
	}
	rows, err := m.admin.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var use cpuUse
	use.server = processCPU(m.pid)
	for _, pid := range pids {
		use.database += processCPU(int(pid))
	}
	return use
}

// processCPU is the time every thread of process pid has spent on a CPU,
// or 0 when the process is gone.
func processCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		onCPU, _, _ := strings.Cut(string(raw), " ")
		ns, err := strconv.ParseInt(onCPU, 10, 64)
		if err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

// perRequest is u spread over a round's requests.
func perRequest(u cpuUse) cpuUse {
	return cpuUse{u.server / benchTransfers, u.database / benchTransfers}
}

// medianUse is the median of each part of us, taken apart.
func medianUse(us []cpuUse) cpuUse {
	var server, database []float64
	for _, u := range us {
		server = append(server, float64(u.server))
		database = append(database, float64(u.database))
	}
	return cpuUse{time.Duration(median(server)), time.Duration(median(database))}
}

// cpuLine writes the CPU time per request of each side, as pick chooses
// it from the rounds.
func cpuLine(bySide map[string][]cpuUse, pick func([]cpuUse) cpuUse) string {
	var parts []string
	for _, side := range []string{"idemgen", "handwritten", "off"} {
		u := pick(bySide[side])
		parts = append(parts, fmt.Sprintf("%s %.0f + %.0f", side, float64(u.server)/1e3, float64(u.database)/1e3))
	}
	return "CPU µs per request, server + database: " + strings.Join(parts, ", ")
}
