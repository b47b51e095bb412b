package pgstore_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// An outage is an error, returned promptly and wrapped (the engine answers
// 503); once the database is back the same store works again.
func TestDatabaseOutage(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	appName := "idemtest_outage_" + randomHex(4)

	upstream := upstreamAddr(t)
	proxy := startProxy(t, "127.0.0.1:0", upstream)
	addr := proxy.addr

	pool := openPoolVia(t, schema, addr, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = appName
	})
	s := pgstore.New(pool)
	n := 0
	claim := func() error {
		n++
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.Claim(cctx, claimFor("k"+strconv.Itoa(n), "tok", time.Minute))
		return err
	}
	if err := claim(); err != nil {
		t.Fatalf("Claim before the outage: %v", err)
	}

	// 1. The server ends every connection of the pool.
	admin, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var killed int
	if err := admin.QueryRow(ctx,
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
		appName).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminated %d backends, %v; want at least 1", killed, err)
	}
	// The pooled connection is dead; the claim that meets it fails (or the
	// pool notices first and dials anew). Either way it answers promptly,
	// and the claim after it succeeds on a fresh connection.
	start := time.Now()
	err = claim()
	t.Logf("Claim on a terminated connection: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	if time.Since(start) > 2*time.Second {
		t.Errorf("Claim on a terminated connection took %v", time.Since(start))
	}
	if err := claim(); err != nil {
		t.Fatalf("Claim after the server ended the connections: %v", err)
	}

	// 2. The database becomes unreachable: connections cut, new ones refused.
	proxy.stop()
	for i := range 3 {
		start := time.Now()
		err := claim()
		d := time.Since(start)
		if err == nil {
			t.Fatalf("Claim %d during the outage succeeded", i)
		}
		var pgErr interface{ SQLState() string }
		t.Logf("Claim during the outage: %v (after %v)", err, d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("Claim during the outage took %v, want a prompt error", d)
		}
		if errors.As(err, &pgErr) {
			t.Logf("  SQLSTATE %s", pgErr.SQLState())
		}
	}

	// 3. The database is back at the same address: the same store works.
	startProxy(t, addr, upstream)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := claim()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Claim after the outage still fails: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// proxy forwards TCP connections to the database so that a test can cut
// them and refuse new ones.
type proxy struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// upstreamAddr is the host:port of the test database, for a proxy to
// forward to.
func upstreamAddr(t *testing.T) string {
	t.Helper()
	up, err := pgxpool.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(up.ConnConfig.Host, strconv.Itoa(int(up.ConnConfig.Port)))
}

// openPoolVia opens a pool on schema that connects through the proxy at
// addr, with a short connect timeout so that an outage shows at once.
func openPoolVia(t *testing.T, schema, addr string, tweak ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return openPool(t, schema, append([]func(*pgxpool.Config){func(c *pgxpool.Config) {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		c.ConnConfig.Host = host
		c.ConnConfig.Port = uint16(p)
		c.ConnConfig.Fallbacks = nil
		c.ConnConfig.ConnectTimeout = 2 * time.Second
	}}, tweak...)...)
}

func startProxy(t *testing.T, listen, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(p.stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
	return p
}

func (p *proxy) stop() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
