package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// BenchmarkSessionReset measures what the session reset behind a
// transaction's COMMIT costs, on one connection, one transaction at a time:
// an empty transaction (BEGIN, SELECT 1, COMMIT) followed by only the
// release of the session's advisory locks, which every transaction's end
// needs, by the full reset (resetSQL), or by the check of the session and
// the lean reset a transaction's end sends when the handler left nothing
// else (sessionCheckSQL, leanResetSQL). The three alternate within every
// round. Besides wall-clock µs per transaction, which a loaded machine
// inflates, it reports the CPU the server process spent per transaction
// when the server runs on this machine and its /proc entry can be read
// (Linux, the same user or root): a figure the machine's other work
// disturbs far less.
//
//	go test -run '^$' -bench SessionReset -benchtime 8x ./runtime/pgstore/
func BenchmarkSessionReset(b *testing.B) {
	pool := openPool(b, newSchema(b))
	ctx := context.Background()
	conn, user := oneConn(b, pool)
	resets := []struct {
		name  string
		queue func(*pgx.Batch)
	}{
		{"unlock", func(bt *pgx.Batch) { bt.Queue(`SELECT pg_advisory_unlock_all()`) }},
		{"full", pgstore.QueueReset},
		{"lean", func(bt *pgx.Batch) { pgstore.QueueLeanReset(bt, user) }},
	}
	const perRound = 500
	pid := conn.Conn().PgConn().PID()
	_, measured := serverCPU(pid)
	wall := make([]time.Duration, len(resets))
	cpu := make([]time.Duration, len(resets))
	n := 0
	for b.Loop() {
		n += perRound
		for i, r := range resets {
			c0, _ := serverCPU(pid)
			start := time.Now()
			if err := emptyTransactions(ctx, conn, perRound, r.queue); err != nil {
				b.Fatal(err)
			}
			wall[i] += time.Since(start)
			c1, _ := serverCPU(pid)
			cpu[i] += c1 - c0
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, r := range resets {
		b.ReportMetric(float64(wall[i].Microseconds())/float64(n), r.name+"-µs/tx")
		if measured {
			b.ReportMetric(float64(cpu[i].Microseconds())/float64(n), r.name+"-server-cpu-µs/tx")
		}
	}
}

// oneConn acquires a connection of pool for the whole benchmark, and
// returns it with the user it is connected as.
func oneConn(b *testing.B, pool *pgxpool.Pool) (*pgxpool.Conn, string) {
	b.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	return conn, pool.Config().ConnConfig.User
}

// emptyTransactions runs n empty transactions on conn, each in one batch
// ended by what queue adds behind its COMMIT.
func emptyTransactions(ctx context.Context, conn *pgxpool.Conn, n int, queue func(*pgx.Batch)) error {
	for range n {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue("SELECT 1")
		b.Queue("COMMIT")
		queue(b)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("an empty transaction: %w", err)
		}
	}
	return nil
}

// serverCPU returns the CPU time, user and system, that the server process
// pid has spent, and false when it cannot be read. /proc counts it in
// clock ticks, 100 a second on Linux.
func serverCPU(pid uint32) (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command, which is in parentheses and may hold
	// spaces: state is the first of them, utime the 12th, stime the 13th.
	end := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return 0, false
	}
	utime, uerr := strconv.ParseInt(fields[11], 10, 64)
	stime, serr := strconv.ParseInt(fields[12], 10, 64)
	if uerr != nil || serr != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}
