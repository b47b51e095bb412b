package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// BenchmarkTxCPU is where a transactional request's CPU goes: for a
// transactional replay of a completed key, for a transactional new key
// (claim, one business write, commit with the completion) and for the same
// business write in a bare transaction, the wall time,
// the CPU of this process (pgstore and pgx, the benchmark's own loop
// included) and that of the PostgreSQL backends that serve the store (its
// pool's and the guard's, told apart from the rest of the server by their
// application_name), per request, one request at a time, the median of
// the rounds. Throughput
// moves with the machine's load; the CPU per request much less, and it is
// what a change to the statements moves. It reads Linux's per-task
// scheduler statistics, so it needs the server on this machine:
//
//	nice go test -run '^$' -bench TxCPU -benchtime 10x ./runtime/pgstore/
func BenchmarkTxCPU(b *testing.B) {
	app := "pgstore_bench_" + randomHex(4)
	s, pool := benchSetupApp(b, app)
	ctx := context.Background()
	resp := benchResponse()
	meter := newBackendMeter(b, app)
	var seq atomic.Int64
	paths := []struct {
		name string
		do   func(int64) error
	}{
		// The same transaction without idempotency.
		{"bare", func(int64) error {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
			if err != nil {
				return err
			}
			if err := writeEffect(ctx, tx, "b"+strconv.FormatInt(seq.Add(1), 10)); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}},
		{"replay", func(i int64) error {
			c := claimFor("k"+strconv.FormatInt(i%benchKeys, 10), "tok-r", time.Minute)
			res, tx, err := s.ClaimTx(ctx, c)
			switch {
			case err != nil:
				return err
			case tx != nil || res.Existing.State != idemstore.StateCompleted:
				return fmt.Errorf("replay met %q", res.Existing.State)
			}
			return nil
		}},
		{"new", func(int64) error {
			c := claimFor("x"+strconv.FormatInt(seq.Add(1), 10), "tok", time.Minute)
			res, tx, err := s.ClaimTx(ctx, c)
			if err != nil {
				return err
			}
			if !res.Won {
				return fmt.Errorf("new key lost to %q", res.Existing.State)
			}
			if err := writeEffect(ctx, tx.Driver(), c.Key); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx, resp)
		}},
	}
	samples := make([][3][]float64, len(paths))
	for b.Loop() {
		for i, p := range paths {
			p0, d0 := processCPU(), meter.read(b)
			ns := timeSerial(b, p.do)
			p1, d1 := processCPU(), meter.read(b)
			samples[i][0] = append(samples[i][0], ns/1e3)
			samples[i][1] = append(samples[i][1], float64((p1-p0).Nanoseconds())/benchBatch/1e3)
			samples[i][2] = append(samples[i][2], float64((d1-d0).Nanoseconds())/benchBatch/1e3)
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, p := range paths {
		b.ReportMetric(median(samples[i][0]), p.name+"-µs/op")
		b.ReportMetric(median(samples[i][1]), p.name+"-client-cpu-µs/op")
		b.ReportMetric(median(samples[i][2]), p.name+"-db-cpu-µs/op")
	}
}

// timeSerial runs f for benchBatch operations one after another and
// returns the wall-clock nanoseconds per operation. One at a time, the CPU
// per request is the statements' own, without the contention of many.
func timeSerial(b *testing.B, f func(i int64) error) float64 {
	start := time.Now()
	for i := range int64(benchBatch) {
		if err := f(i + 1); err != nil {
			b.Fatal(err)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / benchBatch
}

// benchSetupApp is benchSetup on connections that carry app as their
// application_name.
func benchSetupApp(b *testing.B, app string) (*pgstore.Store, *pgxpool.Pool) {
	b.Helper()
	return benchSetup(b, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
}

// backendMeter reads the CPU time of the backends whose application_name
// is app.
type backendMeter struct {
	admin *pgx.Conn
	app   string
}

func newBackendMeter(b *testing.B, app string) *backendMeter {
	b.Helper()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		b.Skipf("no per-task CPU statistics here: %v", err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(ctx) })
	return &backendMeter{admin: conn, app: app}
}

// read returns the CPU time the backends connected now have used.
func (m *backendMeter) read(b *testing.B) time.Duration {
	b.Helper()
	rows, err := m.admin.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, pid := range pids {
		sum += schedCPU(int(pid))
	}
	return sum
}

// schedCPU is the time every thread of process pid has spent on a CPU, or
// 0 when the process is gone.
func schedCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		onCPU, _, _ := strings.Cut(string(raw), " ")
		if ns, err := strconv.ParseInt(onCPU, 10, 64); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
