package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The benchmarks compare the store's paths with the cheapest plain pgx
// statements that could do the same work on a table of the same shape, in
// the same run, and log the throughput ratio (store ÷ bare). The two
// alternate for a few rounds and the ratio of the medians is reported, so
// that a burst of load on a shared machine does not decide it. Run with
//
//	go test -run '^$' -bench . ./runtime/pgstore/
//
// The targets are a ratio of at least 0.8 for both paths.

const benchRounds = 3

const benchKeys = 1000

func benchSetup(b *testing.B) (*pgstore.Store, *pgxpool.Pool) {
	b.Helper()
	s, pool := newStore(b, func(c *pgxpool.Config) { c.MaxConns = 8 })
	ctx := context.Background()
	resp := idem.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/transfers/tr_1"}},
		Body:   []byte(`{"id":"tr_1","amount":100,"currency":"EUR","status":"pending"}`),
	}
	for i := range benchKeys {
		c := claimFor("k"+strconv.Itoa(i), "tok", time.Minute)
		if res, err := s.Claim(ctx, c); err != nil || !res.Won {
			b.Fatalf("prefill: %+v %v", res, err)
		}
		if err := s.Complete(ctx, c.Identity, c.Token, resp); err != nil {
			b.Fatal(err)
		}
	}
	// The bare tables have the same columns, key and index.
	for _, q := range []string{
		"CREATE TABLE bare_replay (LIKE idempotency_keys INCLUDING ALL)",
		"INSERT INTO bare_replay SELECT * FROM idempotency_keys",
		"CREATE TABLE bare_new (LIKE idempotency_keys INCLUDING ALL)",
		"ANALYZE",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return s, pool
}

// run runs f in parallel and returns its nanoseconds per operation.
func runParallel(b *testing.B, f func(i int64) error) float64 {
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := f(next.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// compare runs bare and store alternately for benchRounds rounds and logs
// the ratio of their median costs.
func compare(b *testing.B, what string, bare, store func(b *testing.B) float64) {
	var bareNs, storeNs []float64
	for r := range benchRounds {
		var x, y float64
		b.Run(fmt.Sprintf("bare/round%d", r+1), func(b *testing.B) { x = bare(b) })
		b.Run(fmt.Sprintf("store/round%d", r+1), func(b *testing.B) { y = store(b) })
		if x == 0 || y == 0 {
			return // a sub-benchmark failed or was filtered out
		}
		bareNs, storeNs = append(bareNs, x), append(storeNs, y)
	}
	mb, ms := median(bareNs), median(storeNs)
	b.Logf("%s: median bare %.0f ns/op, store %.0f ns/op: throughput ratio store/bare = %.2f (target >= 0.80)",
		what, mb, ms, mb/ms)
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func BenchmarkReplay(b *testing.B) {
	s, pool := benchSetup(b)
	ctx := context.Background()
	compare(b, "replay", func(b *testing.B) float64 {
		return runParallel(b, func(i int64) error {
			var (
				state, op     string
				fp, hdr, body []byte
				status        int32
				omitted       bool
			)
			return pool.QueryRow(ctx, `SELECT state, operation, fingerprint, status, headers, body, body_omitted
				  FROM bare_replay WHERE tenant = $1 AND scope = $2 AND key = $3`,
				"t1", "createTransfer", "k"+strconv.FormatInt(i%benchKeys, 10)).
				Scan(&state, &op, &fp, &status, &hdr, &body, &omitted)
		})
	}, func(b *testing.B) float64 {
		return runParallel(b, func(i int64) error {
			res, err := s.Claim(ctx, claimFor("k"+strconv.FormatInt(i%benchKeys, 10), "tok-r", time.Minute))
			if err == nil && res.Existing.State != idem.StateCompleted {
				b.Errorf("replay met %q", res.Existing.State)
			}
			return err
		})
	})
}

func BenchmarkNewKey(b *testing.B) {
	s, pool := benchSetup(b)
	ctx := context.Background()
	resp := idem.Response{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/transfers/tr_1"}},
		Body:   []byte(`{"id":"tr_1","amount":100,"currency":"EUR","status":"pending"}`),
	}
	hdr := []byte(`{"Content-Type":["application/json"],"Location":["/transfers/tr_1"]}`)
	fp := claimFor("x", "", 0).Fingerprint
	var round atomic.Int64
	compare(b, "new key", func(b *testing.B) float64 {
		r := strconv.FormatInt(round.Add(1), 10)
		return runParallel(b, func(i int64) error {
			key := "n" + r + "-" + strconv.FormatInt(i, 10)
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
		})
	}, func(b *testing.B) float64 {
		r := strconv.FormatInt(round.Add(1), 10)
		return runParallel(b, func(i int64) error {
			c := claimFor("n"+r+"-"+strconv.FormatInt(i, 10), "tok", time.Minute)
			res, err := s.Claim(ctx, c)
			if err != nil {
				return err
			}
			if !res.Won {
				b.Errorf("new key lost to %q", res.Existing.State)
				return nil
			}
			return s.Complete(ctx, c.Identity, c.Token, resp)
		})
	})
}
