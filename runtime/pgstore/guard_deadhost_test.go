package pgstore_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// freezer makes every connection it dialled go silent at once, without
// closing it: the host of a process that crashed, froze or was cut off
// by the network. The server sees an open, idle socket and nothing else.
type freezer struct {
	frozen atomic.Bool
	thawed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer() *freezer { return &freezer{thawed: make(chan struct{})} }

func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return &frozenConn{Conn: c, f: f}, nil
}

// thaw ends the freeze by closing every connection, as the server would
// finally see it.
func (f *freezer) thaw() {
	f.once.Do(func() {
		close(f.thawed)
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			_ = c.Close()
		}
	})
}

type frozenConn struct {
	net.Conn
	f *freezer
}

func (c *frozenConn) Read(p []byte) (int, error) {
	if c.f.frozen.Load() {
		<-c.f.thawed
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

func (c *frozenConn) Write(p []byte) (int, error) {
	if c.f.frozen.Load() {
		<-c.f.thawed
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// A transactional claim whose host dies (a power loss, a frozen VM, a
// network partition: the process is gone, but nothing closes its
// sockets) must let the key go soon after its lease runs out: PostgreSQL
// ends the handler's transaction through
// idle_in_transaction_session_timeout, the claim's row and locks vanish
// with it, and the client's retry runs (docs/semantics.md §5.1, §7.4; the
// lease "bounds the transaction"). The guard's lock is held at session
// level on a connection idle outside any transaction, which TCP keepalive
// would leave open for hours; its session's idle_session_timeout ends it
// within a few seconds, so the retry of a key the dead host held wins,
// on another replica, within that much past the lease.
func TestAGuardOfADeadHostHoldsTheKeyPastTheLease(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	f := newFreezer()
	app := "deadhost_" + randomHex(6)
	dead := pgstore.New(openPool(t, schema, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DialFunc = f.dial
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}))
	t.Cleanup(f.thaw)
	live := pgstore.New(openPool(t, schema))

	const lease = 2 * time.Second
	res, tx, err := dead.ClaimTx(ctx, claimFor("k1", "tok-dead", lease))
	if err != nil || !res.Won {
		t.Fatalf("ClaimTx = %+v, %v", res, err)
	}
	// The host dies while its handler runs.
	f.frozen.Store(true)

	deadline := time.Now().Add(lease + 8*time.Second)
	var last idemstore.Result
	won := false
	for i := 0; time.Now().Before(deadline); i++ {
		c := claimFor("k1", "tok-retry", time.Minute)
		res, tx2, err := live.ClaimTx(ctx, c)
		if err != nil {
			t.Fatalf("retry's ClaimTx: %v", err)
		}
		last = res
		if res.Won {
			won = true
			_ = tx2.Rollback(ctx)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	// The dead host's sessions and the advisory locks they hold: objsubid
	// 2 is the two-int4 space (the guard's), 1 the one-bigint space (the
	// claim's own, on the handler's session).
	var sessions, guards, claims int
	if err := openPool(t, schema).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1),
		count(*) FILTER (WHERE l.objsubid = 2), count(*) FILTER (WHERE l.objsubid = 1)
		FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app).Scan(&sessions, &guards, &claims); err != nil {
		t.Fatal(err)
	}
	t.Logf("the dead host's sessions still open: %d, holding %d advisory lock(s) of the guard's kind and %d of the claim's", sessions, guards, claims)
	f.thaw()
	_ = tx.Rollback(ctx)
	if !won {
		t.Fatalf("%v after the dead host's claim with a lease of %v, its key still answers every retry as held (last: won %v, in state %q): "+
			"the handler's transaction is gone, but %d guard lock(s) of the dead host's idle session still hold it",
			lease+8*time.Second, lease, last.Won, last.Existing.State, guards)
	}
}

// A live process whose guard connection has nothing to send for longer
// than its session's idle_session_timeout keeps its guards: the heartbeat
// keeps the session alive, and the next claim's guard is asked on the
// same connection without an error.
func TestGuardHeartbeatKeepsALiveSessionsGuards(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	app := "heartbeat_" + randomHex(6)
	s := pgstore.New(openPool(t, schema, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}))
	const timeout = 400 * time.Millisecond
	pgstore.SetGuardHeartbeat(s, timeout/4, timeout)
	tx := wonTx(t, s, "k1", "tok1")
	defer func() { _ = tx.Rollback(ctx) }()
	// What is tested here is time passing on an idle connection.
	time.Sleep(4 * timeout)
	// The guard's session is the one outside a transaction; the
	// handler's holds a lock of the same space (the request's badge).
	var guards int
	if err := openPool(t, schema).QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks l
		JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		  AND a.application_name = $1 AND a.xact_start IS NULL`, app).Scan(&guards); err != nil {
		t.Fatal(err)
	}
	if guards != 1 {
		t.Errorf("after %v with nothing to send, the guard connection holds %d guard lock(s), want 1", 4*timeout, guards)
	}
	res, tx2, err := s.ClaimTx(ctx, claimFor("k2", "tok2", time.Minute))
	if err != nil || !res.Won {
		t.Fatalf("the next claim, after %v: %+v, %v", 4*timeout, res, err)
	}
	_ = tx2.Rollback(ctx)
}
