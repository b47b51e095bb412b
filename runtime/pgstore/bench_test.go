package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The benchmarks compare the store's paths with the cheapest plain pgx
// statements that could do the same work on a table of the same shape, in
// the same run. Every iteration of b.Loop is one round: a batch of bare
// operations, then the same batch through the store, each run by the same
// number of goroutines on the same pool. The reported x-vs-bare is the
// median over the rounds of bare ns/op ÷ store ns/op (the store's share of
// the bare throughput; the target is at least 0.9 for every path), so
// that a burst of load from elsewhere on the machine moves single rounds,
// not the result. More rounds lower the noise:
//
//	go test -run '^$' -bench . -benchtime 40x ./runtime/pgstore/
//
// The built-in ns/op would be a round's time and is suppressed; bare-ns/op
// and store-ns/op are the medians of the two sides.

// benchBatch is the number of operations of each side in one round.
const benchBatch = 2000

// benchWorkers is how many goroutines run each side at once, per CPU.
const benchWorkers = 4

const benchKeys = 1000

// benchResponse is the response every benchmark stores: a transfer's.
func benchResponse() idemstore.Response {
	return idemstore.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/transfers/tr_1"}},
		Body:   []byte(`{"id":"tr_1","amount":100,"currency":"EUR","status":"pending"}`),
	}
}

func benchSetup(b *testing.B, tweak ...func(*pgxpool.Config)) (*pgstore.Store, *pgxpool.Pool) {
	b.Helper()
	s, pool := newStore(b, append([]func(*pgxpool.Config){func(c *pgxpool.Config) { c.MaxConns = int32(benchWorkers * runtime.GOMAXPROCS(0)) }}, tweak...)...)
	ctx := context.Background()
	resp := benchResponse()
	for i := range benchKeys {
		c := claimFor("k"+strconv.Itoa(i), "tok", time.Minute)
		if res, err := s.Claim(ctx, c); err != nil || !res.Won {
			b.Fatalf("prefill: %+v %v", res, err)
		}
		if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
			b.Fatal(err)
		}
	}
	// The bare tables have the same columns, key, index, storage options
	// and rows. The rows matter for the bare side too: on an empty table
	// the planner's generic plan for the bare UPDATE is a sequential scan,
	// which grows slower with every key the benchmark adds.
	for _, q := range []string{
		"CREATE TABLE bare_replay (LIKE idempotency_keys INCLUDING ALL) WITH (fillfactor = 80)",
		"INSERT INTO bare_replay SELECT * FROM idempotency_keys",
		"CREATE TABLE bare_new (LIKE idempotency_keys INCLUDING ALL) WITH (fillfactor = 80)",
		"INSERT INTO bare_new SELECT * FROM idempotency_keys",
		"ANALYZE",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return s, pool
}

// timeBatch runs f for benchBatch operations from benchWorkers goroutines
// per CPU and returns the wall-clock nanoseconds per operation.
func timeBatch(b *testing.B, f func(i int64) error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range benchWorkers * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > benchBatch {
					return
				}
				if err := f(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / benchBatch
}

// compare runs one round per b.Loop iteration and reports the medians.
func compare(b *testing.B, what string, bare, store func(i int64) error) {
	var bareNs, storeNs, ratios []float64
	for b.Loop() {
		x := timeBatch(b, bare)
		y := timeBatch(b, store)
		bareNs, storeNs, ratios = append(bareNs, x), append(storeNs, y), append(ratios, x/y)
	}
	if b.Failed() {
		return
	}
	ratio := median(ratios)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(median(bareNs), "bare-ns/op")
	b.ReportMetric(median(storeNs), "store-ns/op")
	b.ReportMetric(ratio, "x-vs-bare")
	b.Logf("%s: %d rounds of %d operations; median bare %.0f ns/op, store %.0f ns/op; median throughput ratio store/bare = %.2f (target >= 0.90)",
		what, len(ratios), benchBatch, median(bareNs), median(storeNs), ratio)
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func BenchmarkReplay(b *testing.B) {
	s, pool := benchSetup(b)
	ctx := context.Background()
	replay := claimFor("", "tok-r", time.Minute)
	compare(b, "replay", func(i int64) error {
		var (
			state, op             string
			fp, hdr, body         []byte
			leaseUntil, expiresAt pgtype.Timestamptz
			status                int32
			omitted               bool
		)
		// The table columns the store's claim reads: a replay has to check
		// expiry and lease as well as return the response.
		return pool.QueryRow(ctx, `SELECT state, operation, fingerprint, lease_until, expires_at,
			       status, headers, body, body_omitted
			  FROM bare_replay WHERE tenant = $1 AND scope = $2 AND key = $3`,
			"t1", "createTransfer", "k"+strconv.FormatInt(i%benchKeys, 10)).
			Scan(&state, &op, &fp, &leaseUntil, &expiresAt, &status, &hdr, &body, &omitted)
	}, func(i int64) error {
		c := replay // the fingerprint is computed once, as the bare side has none
		c.Key = "k" + strconv.FormatInt(i%benchKeys, 10)
		res, err := s.Claim(ctx, c)
		if err == nil && res.Existing.State != idemstore.StateCompleted {
			return fmt.Errorf("replay met %q", res.Existing.State)
		}
		return err
	})
}

func BenchmarkNewKey(b *testing.B) {
	s, pool := benchSetup(b)
	ctx := context.Background()
	resp := benchResponse()
	hdr := []byte(`{"Content-Type":["application/json"],"Location":["/transfers/tr_1"]}`)
	claim := claimFor("", "tok", time.Minute)
	fp := claim.Fingerprint
	// Keys never repeat across rounds: every operation meets a new key.
	var seq atomic.Int64
	compare(b, "new key", func(int64) error {
		key := "n" + strconv.FormatInt(seq.Add(1), 10)
		if _, err := pool.Exec(ctx, `INSERT INTO bare_new
			(tenant, scope, key, operation, fingerprint, state, lease_token, lease_until, expires_at)
			VALUES ($1, $2, $3, $4, $5, 'in_flight', $6, now() + interval '1 minute', now() + interval '1 hour')`,
			"t1", "createTransfer", key, "createTransfer", fp, "tok"); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, `UPDATE bare_new SET state = 'completed', completed_at = now(),
			status = $5, headers = $6, body = $7, body_omitted = false
			WHERE tenant = $1 AND scope = $2 AND key = $3 AND lease_token = $4 AND state = 'in_flight'`,
			"t1", "createTransfer", key, "tok", int32(201), hdr, resp.Body)
		return err
	}, func(int64) error {
		c := claim
		c.Key = "n" + strconv.FormatInt(seq.Add(1), 10)
		res, err := s.Claim(ctx, c)
		if err != nil {
			return err
		}
		if !res.Won {
			return fmt.Errorf("new key lost to %q", res.Existing.State)
		}
		return s.Complete(ctx, c.Identity, c.Token, resp)
	})
}

// BenchmarkTransaction is the transactional path against the same
// transaction without idempotency: a business write between BEGIN and
// COMMIT, one round trip each on the bare side. The store's side claims a
// new key in the batch that begins the transaction (with the key's guard on
// the guard's connection at the same time), makes the same write through
// the handler's transaction, and commits with the completion.
func BenchmarkTransaction(b *testing.B) {
	s, pool := benchSetup(b)
	ctx := context.Background()
	resp := benchResponse()
	claim := claimFor("", "tok", time.Minute)
	var seq atomic.Int64
	compare(b, "transaction", func(int64) error {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return err
		}
		if err := writeEffect(ctx, tx, "t"+strconv.FormatInt(seq.Add(1), 10)); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		return tx.Commit(ctx)
	}, func(int64) error {
		c := claim
		c.Key = "t" + strconv.FormatInt(seq.Add(1), 10)
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
	})
}

// BenchmarkTransactionParts takes BenchmarkTransaction's gap apart: the
// bare transaction of a business write on one connection, then the same
// with each statement of the transactional path added in turn, each step
// keeping the ones before. The last two steps are alternatives: the full
// session reset behind COMMIT (resetSQL), and the one a transaction's end
// sends when the handler left nothing on the session but settings and
// sequences (sessionCheckSQL and leanResetSQL). Steps alternate within
// every round, and each reports the median of its rounds' µs per
// transaction (latency, one transaction at a time; the guard, on its own
// connection, is not in it):
//
//	go test -run '^$' -bench TransactionParts -benchtime 20x ./runtime/pgstore/
func BenchmarkTransactionParts(b *testing.B) {
	_, pool := benchSetup(b)
	ctx := context.Background()
	conn, user := oneConn(b, pool)
	fp := claimFor("", "", 0).Fingerprint
	body := benchResponse().Body
	steps := []string{"bare", "+timeouts", "+claim", "+completion", "+reset", "+lean-reset"}
	var seq int
	// one runs one transaction with the first n+1 steps (the last two
	// alternatives).
	one := func(n int) error {
		seq++
		key := "p" + strconv.Itoa(seq)
		begin := &pgx.Batch{}
		begin.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		if n >= 1 {
			begin.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true),
			       set_config('statement_timeout', $1, true)`, "60000")
		}
		if n >= 2 {
			begin.Queue(`SELECT idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
				"t1", "createTransfer", key, "createTransfer", fp, "tok", int64(60e6), int64(3600e6), true, true)
		}
		if err := conn.SendBatch(ctx, begin).Close(); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "INSERT INTO effects (marker) VALUES ($1)", key); err != nil {
			return err
		}
		end := &pgx.Batch{}
		if n >= 3 {
			end.Queue(`SELECT idempotency_complete($1, $2, $3, $4, $5, $6, $7, $8)`,
				"t1", "createTransfer", key, "tok", int32(201), []byte{}, body, false)
		}
		end.Queue("COMMIT")
		switch {
		case n == 5:
			pgstore.QueueLeanReset(end, user)
		case n == 4:
			pgstore.QueueReset(end)
		case n >= 2:
			// The claim's session locks must go, reset or not.
			end.Queue(`SELECT pg_advisory_unlock_all()`)
		}
		return conn.SendBatch(ctx, end).Close()
	}
	const perRound = 100
	us := make([][]float64, len(steps))
	for b.Loop() {
		for n := range steps {
			start := time.Now()
			for range perRound {
				if err := one(n); err != nil {
					b.Fatal(err)
				}
			}
			us[n] = append(us[n], float64(time.Since(start).Microseconds())/perRound)
		}
	}
	b.ReportMetric(0, "ns/op")
	for n, name := range steps {
		b.ReportMetric(median(us[n]), name+"-µs/tx")
	}
}
