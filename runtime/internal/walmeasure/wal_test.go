package walmeasure_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
)

// The key of the measurement has the shape of docs/scaling.md's row: a
// UUID-sized key, a tenant of about 10 bytes, a 32-byte fingerprint, about
// 70 bytes of stored headers and a 1 KiB body.
var (
	walBody   = []byte(`{"id":"tr_1","memo":"` + strings.Repeat("x", 1024-len(`{"id":"tr_1","memo":""}`)) + `"}`)
	walHeader = map[string][]string{"Content-Type": {"application/json"}, "Location": {"/transfers/tr_0123456789abcdef"}}
)

// sweepBatch is idem.Sweep's default batch.
const sweepBatch = 1000

// BenchmarkWAL reports WAL-B/key: the bytes of WAL the server wrote per key
// between the first and the last key of the run (pg_current_wal_insert_lsn
// before and after, so WAL still in the server's buffers counts too). No
// checkpoint is forced, so full-page images are not included unless the
// server happened to checkpoint during the run; "sweep after checkpoint"
// forces one between writing the keys and sweeping them, to show what the
// first change of each page after a checkpoint adds.
func BenchmarkWAL(b *testing.B) {
	b.Run("claim+complete", func(b *testing.B) {
		s, wal := setup(b)
		keys := newKeys(b.N)
		wal.measure(b, len(walBody), func() {
			for _, k := range keys {
				writeKey(b, s, k, time.Hour)
			}
		})
	})
	b.Run("tx claim+commit", func(b *testing.B) {
		s, wal := setup(b)
		ctx := context.Background()
		keys := newKeys(b.N)
		wal.measure(b, len(walBody), func() {
			for _, k := range keys {
				res, tx, err := s.ClaimTx(ctx, claim(k, time.Hour))
				if err != nil || !res.Won {
					b.Fatalf("claim %s: %+v %v", k, res, err)
				}
				if err := tx.Commit(ctx, idemstore.Response{Status: 201, Header: walHeader, Body: walBody}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	sweep := func(b *testing.B, checkpoint bool) {
		s, wal := setup(b)
		ctx := context.Background()
		const ttl = time.Second
		for _, k := range newKeys(b.N) {
			writeKey(b, s, k, ttl)
		}
		time.Sleep(ttl + 100*time.Millisecond)
		if checkpoint {
			if _, err := wal.conn.Exec(ctx, "CHECKPOINT"); err != nil {
				b.Skipf("CHECKPOINT needs a superuser or pg_checkpoint: %v", err)
			}
		}
		swept := 0
		wal.measure(b, 1, func() {
			for {
				n, err := s.Sweep(ctx, sweepBatch)
				if err != nil {
					b.Fatal(err)
				}
				if swept += n; n < sweepBatch {
					return
				}
			}
		})
		if swept != b.N {
			b.Fatalf("swept %d keys, want %d", swept, b.N)
		}
	}
	b.Run("sweep", func(b *testing.B) { sweep(b, false) })
	b.Run("sweep after checkpoint", func(b *testing.B) { sweep(b, true) })
}

// walMeter reads the server's WAL position on a connection of its own.
type walMeter struct{ conn *pgx.Conn }

func setup(b *testing.B) (*pgstore.Store, walMeter) {
	b.Helper()
	s, url := pgstoretest.New(b)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return s, walMeter{conn}
}

func (m walMeter) position(b *testing.B) int64 {
	b.Helper()
	var lsn int64
	if err := m.conn.QueryRow(context.Background(),
		`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// measure runs write, which handles b.N keys, and reports the WAL it wrote
// per key. Less than atLeast bytes a key means the measurement is broken:
// the write paths must log the body at least once, a sweep something.
func (m walMeter) measure(b *testing.B, atLeast int, write func()) {
	b.Helper()
	b.ResetTimer()
	before := m.position(b)
	write()
	after := m.position(b)
	b.StopTimer()
	perKey := float64(after-before) / float64(b.N)
	b.ReportMetric(perKey, "WAL-B/key")
	if perKey < float64(atLeast) {
		b.Fatalf("%d bytes of WAL for %d keys, want at least %d a key", after-before, b.N, atLeast)
	}
}

// writeKey claims k and stores its answer, as a non-transactional
// operation does.
func writeKey(b *testing.B, s *pgstore.Store, k string, ttl time.Duration) {
	b.Helper()
	ctx := context.Background()
	c := claim(k, ttl)
	res, err := s.Claim(ctx, c)
	if err != nil || !res.Won {
		b.Fatalf("claim %s: %+v %v", k, res, err)
	}
	if err := s.Complete(ctx, c.Identity, c.Token, idemstore.Response{Status: 201, Header: walHeader, Body: walBody}); err != nil {
		b.Fatal(err)
	}
}

func claim(key string, ttl time.Duration) idemstore.Claim {
	fp := sha256.Sum256([]byte(key))
	return idemstore.Claim{
		Identity:      idemstore.Identity{Tenant: "tenant-042", Scope: "createTransfer", Key: key},
		Operation:     "createTransfer",
		Fingerprint:   fp[:],
		Token:         "tok-" + key,
		Lease:         min(ttl, 30*time.Second),
		TTL:           ttl,
		OnLeaseExpiry: idemstore.FailClosed,
	}
}

// newKeys returns n random keys of a UUID's length (36 characters).
func newKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		b := make([]byte, 18)
		_, _ = rand.Read(b)
		keys[i] = hex.EncodeToString(b)
	}
	return keys
}
