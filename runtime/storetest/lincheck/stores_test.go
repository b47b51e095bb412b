package lincheck

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/tcpproxy"
	"github.com/idemgen/idemgen/runtime/idemoutbox/pgoutbox"
	"github.com/idemgen/idemgen/runtime/idemoutbox/sqliteoutbox"
	"github.com/idemgen/idemgen/runtime/pgstore/pgstoretest"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

const redisURLEnv = "IDEMGEN_TEST_REDIS_URL"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// The in-memory store lives in the service's process, so the only fault
// that leaves it standing is a client that hangs up.
func TestLinearizableMemory(t *testing.T) {
	checkRun(t, memoryRun(t))
}

// memoryRun is the memory store's run.
func memoryRun(t *testing.T) run {
	effects := filepath.Join(t.TempDir(), "effects")
	return run{
		name:    "memory",
		env:     []string{envService + "=memory", envEffects + "=" + effects},
		hangUps: true,
		effects: fileEffects(effects),
	}
}

// SQLite is embedded: the service is killed with -9 and restarted on the
// same file while its transactions are open. The restarted service is the
// database's only process, so it ends the leases its predecessor left
// (docs/semantics.md §7.4) and their retries take them over at once; the
// model, which knows no time, accepts a takeover whenever a claim's
// holder was killed, as it accepts one after the lease.
func TestLinearizableSQLite(t *testing.T) {
	r, ended := sqliteRun(t)
	checkRun(t, r)
	logEnded(t, ended)
}

// sqliteRun is SQLite's run on a new database file, and the file its
// service's starts append the count of leases they ended to.
func sqliteRun(t *testing.T) (run, string) {
	path := filepath.Join(t.TempDir(), "idem.db")
	ended := filepath.Join(t.TempDir(), "ended")
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec("CREATE TABLE lin_effects (key TEXT NOT NULL, run TEXT NOT NULL, req TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := sqliteoutbox.Migrate(ctx, s.DB()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return run{
		name:    "sqlite",
		model:   model{transactional: true},
		env:     []string{envService + "=sqlite", envTarget + "=" + path, envEnded + "=" + ended},
		hangUps: true,
		kill:    true,
		count: func(query string) (int, error) {
			// Plain database/sql, not a store: an open store would hold
			// the database's owner lock against the service's restarts.
			db, err := sql.Open("sqlite", sqlitestore.DSN(path))
			if err != nil {
				return 0, err
			}
			defer db.Close()
			var n int
			return n, db.QueryRowContext(ctx, query).Scan(&n)
		},
		effects: func() (effects, error) {
			s, err := sqlitestore.Open(ctx, path)
			if err != nil {
				return nil, err
			}
			defer s.Close()
			rows, err := s.DB().QueryContext(ctx, "SELECT key, run, req FROM lin_effects")
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			return readEffects(rows)
		},
	}, ended
}

// logEnded logs how many leases the service's starts ended, from the file
// each start appends its count to.
func logEnded(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	starts, sum := 0, 0
	for _, line := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(line)
		if err != nil {
			t.Fatal(err)
		}
		starts++
		sum += n
	}
	t.Logf("leases of killed services' claims ended at restart: %d over %d starts", sum, starts)
}

// PostgreSQL is reached through a fault proxy; besides the proxy's faults
// its backends are terminated and the service is killed with -9.
func TestLinearizablePostgreSQL(t *testing.T) {
	checkRun(t, postgresRun(t))
}

// postgresRun is PostgreSQL's run, on a new schema.
func postgresRun(t *testing.T) run {
	_, base := pgstoretest.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	up, _ := pgoutbox.Schema()
	if _, err := conn.Exec(ctx, "CREATE TABLE lin_effects (key text NOT NULL, run text NOT NULL, req text NOT NULL);\n"+up); err != nil {
		t.Fatal(err)
	}
	p, u := tcpproxy.NewForURL(t, base, "5432")
	app := "lincheck_" + randomHex(6)
	q := u.Query()
	q.Set("application_name", app)
	q.Set("pool_max_conns", "8")
	u.RawQuery = q.Encode()

	terminate := fault{"pg_terminate_backend", func(rng *rand.Rand) {
		var pids []int32
		rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
		if err == nil {
			pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		}
		if err != nil || len(pids) == 0 {
			return
		}
		_, _ = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", pids[rng.IntN(len(pids))])
	}}
	return run{
		name:    "postgres",
		model:   postgresModel(),
		env:     []string{envService + "=postgres", envTarget + "=" + u.String()},
		faults:  append(proxyFaults(p), terminate),
		kill:    true,
		hangUps: true,
		count: func(query string) (int, error) {
			var n int
			return n, conn.QueryRow(ctx, query).Scan(&n)
		},
		phases: func() ([]phaseRecord, error) {
			rows, err := conn.Query(ctx, "SELECT convert_from(result, 'UTF8'), created_at FROM idempotency_phases WHERE name = '"+effectCharge+"'")
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowToStructByPos[phaseRecord])
		},
		effects: func() (effects, error) {
			rows, err := conn.Query(ctx, "SELECT key, run, req FROM lin_effects")
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			return readEffects(rows)
		},
	}
}

// postgresModel is the model PostgreSQL's runs are checked against. A 409
// instead of a 422 to a request whose body differs from the claim's, while
// that claim's transaction is open, is a known deviation of pgstore
// (model.otherBodyMayBeBusy); IDEMGEN_LIN_STRICT=1 shows it.
func postgresModel() model {
	return model{transactional: true, otherBodyMayBeBusy: os.Getenv(envStrict) == "", guardMayRefuse: true}
}

// A single Redis is reached through a fault proxy, and the service is
// killed with -9.
func TestLinearizableRedis(t *testing.T) {
	checkRun(t, redisRun(t))
}

// redisRun is a single Redis's run, under a key prefix of its own.
func redisRun(t *testing.T) run {
	raw := os.Getenv(redisURLEnv)
	if raw == "" {
		t.Skip(redisURLEnv + " is unset; set it to a Redis URL (redis://host:port/db) to run the Redis tests")
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := tcpproxy.New(t, opt.Addr)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	prefix := "lincheck:" + randomHex(6) + ":"
	c := redis.NewClient(opt)
	t.Cleanup(func() {
		defer c.Close()
		if err := redistest.DeleteUnder(context.Background(), c, prefix); err != nil {
			t.Errorf("delete the run's keys: %v", err)
		}
	})
	effects := filepath.Join(t.TempDir(), "effects")
	return run{
		name:    "redis",
		env:     []string{envService + "=redis", envTarget + "=" + u.String(), envPrefix + "=" + prefix, envEffects + "=" + effects},
		faults:  proxyFaults(p),
		kill:    true,
		hangUps: true,
		phases:  redisPhases(c, prefix),
		effects: fileEffects(effects),
	}
}

// A Redis Cluster of three masters with a replica each, every node
// reached through a fault proxy of its own. Besides the proxies' faults
// and kill -9 of the service, a replica takes its master's place by a
// manual failover (CLUSTER FAILOVER, which waits for the replica to catch
// up, so no acknowledged write is lost).
func TestLinearizableRedisCluster(t *testing.T) {
	checkRun(t, clusterRun(t))
}

// clusterRun is a Redis Cluster's run, on a cluster of its own that
// redistest starts on loopback ports and stops when the test ends.
func clusterRun(t *testing.T) run {
	if os.Getenv(redisURLEnv) == "" {
		t.Skip(redisURLEnv + " is unset; set it to a Redis URL (redis://host:port/db) to run the Redis tests")
	}
	addrs, stop, err := redistest.StartReplicatedCluster(redistest.Masters, 1)
	if err != nil {
		t.Fatalf("start a Redis Cluster: %v", err)
	}
	t.Cleanup(stop)
	var ps []*tcpproxy.Proxy
	var routes []string
	for _, a := range addrs {
		p := tcpproxy.New(t, a)
		ps = append(ps, p)
		routes = append(routes, a+"="+p.Addr())
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	effects := filepath.Join(t.TempDir(), "effects")
	return run{
		name:   "redis-cluster",
		phases: redisPhases(c, "lincheck:"),
		env: []string{envService + "=cluster", envTarget + "=" + strings.Join(addrs, ","),
			envRoutes + "=" + strings.Join(routes, ","), envPrefix + "=lincheck:", envEffects + "=" + effects},
		faults:  append(proxyFaults(ps...), failover(t, addrs)),
		kill:    true,
		hangUps: true,
		effects: fileEffects(effects),
	}
}

// failover promotes a random replica of the cluster at addrs in its
// master's place, and returns once it serves as master.
func failover(t *testing.T, addrs []string) fault {
	return fault{"failover", func(rng *rand.Rand) {
		ctx := context.Background()
		var replicas []string
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			role, err := c.Do(ctx, "ROLE").Slice()
			_ = c.Close()
			if err == nil && len(role) > 0 && role[0] == "slave" {
				replicas = append(replicas, a)
			}
		}
		if len(replicas) == 0 {
			t.Errorf("failover: no replica among %v", addrs)
			return
		}
		c := redis.NewClient(&redis.Options{Addr: replicas[rng.IntN(len(replicas))]})
		defer c.Close()
		if err := c.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Errorf("CLUSTER FAILOVER: %v", err)
			return
		}
		// A manual failover waits for the replica to catch up with its
		// master, which a loaded machine can hold up for seconds; past
		// that, FORCE promotes it without the master's agreement (a
		// failover a real outage brings about, no less a fault).
		promoted := func(d time.Duration) bool {
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if role, err := c.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
					return true
				}
			}
			return false
		}
		if promoted(10 * time.Second) {
			return
		}
		if err := c.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err != nil {
			t.Errorf("CLUSTER FAILOVER FORCE: %v", err)
			return
		}
		if !promoted(20 * time.Second) {
			t.Errorf("failover: the replica was not promoted within 30s, FORCE included")
		}
	}}
}

// rows is what *sql.Rows and pgx.Rows share.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// readEffects collects the effects from the rows of the effects table.
func readEffects(rs rows) (effects, error) {
	out := effects{}
	for rs.Next() {
		var k string
		var e effect
		if err := rs.Scan(&k, &e.Run, &e.Req); err != nil {
			return nil, err
		}
		out[k] = append(out[k], e)
	}
	return out, rs.Err()
}
