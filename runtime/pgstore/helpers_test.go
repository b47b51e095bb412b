package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

const urlEnv = "IDEMGEN_TEST_DATABASE_URL"

func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		t.Skip(urlEnv + " is unset; set it to a PostgreSQL URL (postgres://user@host:port/db) to run the pgstore tests")
	}
	return u
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSchema creates an empty schema with the pgstore objects in it and drops
// it, with everything in it, when the test ends.
func newSchema(t testing.TB) string {
	t.Helper()
	return newSchemaIn(t, testURL(t))
}

// newSchemaIn is newSchema in the database at url.
func newSchemaIn(t testing.TB, url string) string {
	t.Helper()
	ctx := context.Background()
	schema := "idemtest_" + randomHex(6)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	pool := openPoolIn(t, url, schema)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	// The business table of the transactional tests.
	if _, err := pool.Exec(ctx, "CREATE TABLE effects (marker text NOT NULL)"); err != nil {
		t.Fatalf("create effects: %v", err)
	}
	return schema
}

// openPool opens a pool whose connections use schema; tweak adjusts its
// configuration. The pool closes when the test ends.
func openPool(t testing.TB, schema string, tweak ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return openPoolIn(t, testURL(t), schema, tweak...)
}

// openPoolIn is openPool on the database at url.
func openPoolIn(t testing.TB, url, schema string, tweak ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", urlEnv, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	for _, f := range tweak {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(func() { closePool(t, pool) })
	return pool
}

// closePool closes pool, which waits for every connection to come back. A
// connection that never does (a transaction a failed test left open, or
// one the store leaked) is reported instead of hanging the run until its
// timeout, which would hide the failure that caused it.
func closePool(t testing.TB, pool *pgxpool.Pool) {
	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Errorf("the pool did not close within a minute: a connection was never given back")
	}
}

// newStore returns a store on a fresh schema.
func newStore(t testing.TB, tweak ...func(*pgxpool.Config)) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := openPool(t, newSchema(t), tweak...)
	return pgstore.New(pool), pool
}

// roundTrips counts what a pool sends: pgx queries and batches through a
// tracer, and writes on the socket, which is where a round trip starts
// (pgx writes a query or a whole pipelined batch at once, then waits).
type roundTrips struct {
	queries, batches, writes atomic.Int64
}

func (r *roundTrips) install(cfg *pgxpool.Config) {
	cfg.ConnConfig.Tracer = r
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, writes: &r.writes}, nil
	}
	// The pool pings a connection that sat idle for a second before handing
	// it out; that round trip belongs to the pool, not to the store.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
}

type snapshot struct{ queries, batches, writes int64 }

func (r *roundTrips) snap() snapshot {
	return snapshot{r.queries.Load(), r.batches.Load(), r.writes.Load()}
}

func (s snapshot) sub(o snapshot) snapshot {
	return snapshot{s.queries - o.queries, s.batches - o.batches, s.writes - o.writes}
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countedStore returns a store of one connection in mode whose round
// trips are counted, in a database of its own (quietDatabase), and whose
// guard connection stays open while idle.
func countedStore(t *testing.T, mode pgx.QueryExecMode) (*pgstore.Store, *roundTrips) {
	t.Helper()
	rt := new(roundTrips)
	db := quietDatabase(t)
	s := pgstore.New(openPoolIn(t, db, newSchemaIn(t, db), func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = mode
		rt.install(c)
	}))
	pgstore.SetGuardIdleClose(s, time.Hour)
	return s, rt
}

// quietDatabase creates a database of the test's own, returns its URL,
// and drops it when the test ends. A schema created or dropped in a
// database (by any test that makes one, newSchema's too) has PostgreSQL
// parse the prepared statements of every session of that database again,
// and the check at a transaction's end reads its own statement parsed
// again since the transaction began as a handler's DISCARD PLANS: that end
// sends the full reset, a round trip and its statements more. A test that
// counts what a transaction's end sends counts it in a database where
// only the test itself changes anything, before it counts.
func quietDatabase(t testing.TB) string {
	t.Helper()
	base := testURL(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	name := "idemtest_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", urlEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// handlerSteps runs a handler's statements on its transaction h, where a
// test's list writes a savepoint as SQL (SAVEPOINT s, RELEASE SAVEPOINT s,
// ROLLBACK TO SAVEPOINT s), which pgstore refuses of a handler, as the
// nested transaction that stands for it (Begin, Commit, Rollback).
type handlerSteps struct {
	h      pgx.Tx
	nested []pgx.Tx
}

// exec runs q in the innermost open nested transaction, or h.
func (s *handlerSteps) exec(ctx context.Context, q string) error {
	top := s.h
	if n := len(s.nested); n > 0 {
		top = s.nested[n-1]
	}
	switch q {
	case `SAVEPOINT s`:
		sp, err := top.Begin(ctx)
		if err == nil {
			s.nested = append(s.nested, sp)
		}
		return err
	case `RELEASE SAVEPOINT s`, `ROLLBACK TO SAVEPOINT s`:
		if len(s.nested) == 0 {
			return errors.New("no nested transaction open")
		}
		s.nested = s.nested[:len(s.nested)-1]
		if q == `RELEASE SAVEPOINT s` {
			return top.Commit(ctx)
		}
		return top.Rollback(ctx)
	}
	_, err := top.Exec(ctx, q)
	return err
}
