// Package redistest starts throwaway Redis Clusters on loopback ports for
// tests: redisstore's own tests and the example service's run their cluster
// proofs on one. It needs redis-server and redis-cli on PATH.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Masters is the size of the clusters Shared starts: the smallest Redis
// Cluster with more than one shard, so that records land on different
// nodes.
const Masters = 3

// StartCluster starts masters redis-server processes in cluster mode on
// free loopback ports, without persistence, joins them with
// redis-cli --cluster create (no replicas), and waits until every node
// serves all slots and sees the others. It returns the masters' addresses
// and a function that kills the servers and removes their files; on an
// error, whatever was started is already stopped. Without redis-server or
// redis-cli on PATH the error wraps exec.ErrNotFound.
func StartCluster(masters int) (addrs []string, stop func(), err error) {
	return StartReplicatedCluster(masters, 0)
}

// StartReplicatedCluster is StartCluster with replicas replicas behind
// each master, for tests that fail a master over to its replica. It
// returns the addresses of every node, masters and replicas; which is
// which, redis-cli decides (ROLE tells).
func StartReplicatedCluster(masters, replicas int) (addrs []string, stop func(), err error) {
	if masters < 1 || replicas < 0 {
		return nil, nil, fmt.Errorf("a cluster of %d masters with %d replicas each", masters, replicas)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, nil, err
		}
	}
	dir, err := os.MkdirTemp("", "idemgen-redis-cluster-")
	if err != nil {
		return nil, nil, err
	}
	c := &servers{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i := range masters * (1 + replicas) {
		addr, err := c.startNode(i)
		if err != nil {
			return nil, nil, err
		}
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := waitClusterOK(addrs, 30*time.Second); err != nil {
		return nil, nil, err
	}
	return addrs, c.stop, nil
}

// StartNode starts one redis-server in cluster mode on a free loopback
// port, outside any cluster, for a test that adds a node to one (CLUSTER
// MEET). It returns the node's address and a function that kills it and
// removes its files.
func StartNode() (addr string, stop func(), err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "idemgen-redis-node-")
	if err != nil {
		return "", nil, err
	}
	c := &servers{dir: dir}
	if addr, err = c.startNode(0); err != nil {
		c.stop()
		return "", nil, err
	}
	return addr, c.stop, nil
}

// servers are the redis-server processes of one cluster and the directory
// that holds their files.
type servers struct {
	dir   string
	nodes []node
}

// node is one redis-server process; exited receives its Wait's result.
type node struct {
	cmd    *exec.Cmd
	exited chan error
}

// startNode starts one cluster node on a free port and waits until it
// answers PING. A port (or its cluster bus port, 10000 above it) that
// another process takes in between makes the node fail to start; it is
// tried again on another port.
func (c *servers) startNode(i int) (string, error) {
	var lastErr error
	for range 10 {
		port := 20000 + rand.IntN(10000)
		if !portFree(port) || !portFree(port+10000) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		nodeDir := filepath.Join(c.dir, fmt.Sprintf("node%d-%d", i, port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return "", err
		}
		cmd := exec.Command("redis-server",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--dir", nodeDir, "--logfile", filepath.Join(nodeDir, "redis.log"))
		if err := cmd.Start(); err != nil {
			return "", fmt.Errorf("start redis-server: %w", err)
		}
		n := node{cmd: cmd, exited: make(chan error, 1)}
		go func() { n.exited <- cmd.Wait() }()
		c.nodes = append(c.nodes, n)
		if err := waitPing(addr, n.exited); err != nil {
			lastErr = err
			_ = cmd.Process.Kill()
			continue
		}
		return addr, nil
	}
	return "", fmt.Errorf("no cluster node started on a free port: %w", lastErr)
}

// stop kills the servers, waits for them to exit and removes their files.
func (c *servers) stop() {
	for _, n := range c.nodes {
		_ = n.cmd.Process.Kill()
	}
	for _, n := range c.nodes {
		select {
		case err := <-n.exited:
			n.exited <- err // a node that failed to start was awaited once already
		case <-time.After(10 * time.Second):
		}
	}
	// A server may still be closing its log for a moment after it is gone.
	for range 50 {
		if os.RemoveAll(c.dir) == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// waitPing waits up to 10 s for the server at addr to answer PING, and
// gives up at once if it exits.
func waitPing(addr string, exited chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("redis-server on %s exited: %v", addr, err)
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer within 10s", addr)
}

// waitClusterOK waits until every node serves all slots and sees every
// other node.
func waitClusterOK(addrs []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		var info string
		for {
			var err error
			info, err = c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(addrs))) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				return fmt.Errorf("node %s not ready after %v: %v\n%s", addr, within, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	return nil
}

// Shared is a cluster of Masters masters that a test binary starts at its
// first use and shares among its tests; TestMain calls Stop after the
// tests. Declare one per test binary:
//
//	var cluster = &redistest.Shared{AddrsEnv: "MY_TESTS_CLUSTER", RequiredEnv: "IDEMGEN_TEST_REDIS_URL"}
type Shared struct {
	// AddrsEnv, when not empty, names an environment variable that hands
	// a child process of a multi-process test the addresses of its
	// parent's cluster (ChildEnv): with it set, Addrs returns them and
	// starts nothing.
	AddrsEnv string
	// RequiredEnv names an environment variable that says Redis is meant
	// to be on this machine: when it is set, a cluster that cannot start
	// fails the test even if redis-server is missing. When it is unset, a
	// missing redis-server or redis-cli skips the test instead.
	RequiredEnv string

	once  sync.Once
	addrs []string
	stop  func()
	err   error
}

// Addrs returns the addresses of the cluster's masters, starting it if it
// is not running. A cluster that cannot start fails t, or skips it when
// redis-server or redis-cli is missing and RequiredEnv is unset.
func (s *Shared) Addrs(t testing.TB) []string {
	t.Helper()
	if s.AddrsEnv != "" {
		if v := os.Getenv(s.AddrsEnv); v != "" {
			return strings.Split(v, ",")
		}
	}
	s.once.Do(func() { s.addrs, s.stop, s.err = StartCluster(Masters) })
	if s.err != nil {
		if errors.Is(s.err, exec.ErrNotFound) {
			switch {
			case s.RequiredEnv == "":
				t.Skipf("no Redis Cluster: %v (install redis-server and redis-cli)", s.err)
			case os.Getenv(s.RequiredEnv) == "":
				t.Skipf("no Redis Cluster: %v (install redis-server and redis-cli, or set %s to make this a failure)", s.err, s.RequiredEnv)
			}
		}
		t.Fatalf("start a Redis Cluster: %v", s.err)
	}
	return s.addrs
}

// ChildEnv returns the AddrsEnv=addresses entry that lets a child process
// use the cluster this process runs. Call it after Addrs.
func (s *Shared) ChildEnv() string {
	return s.AddrsEnv + "=" + strings.Join(s.addrs, ",")
}

// Stop stops the cluster if this process started one. It is safe to call
// when none was started.
func (s *Shared) Stop() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// DeleteUnder deletes every key whose name starts with prefix, on every
// master of a cluster or on a single Redis: what a test wrote under a
// prefix of its own, when it ends.
func DeleteUnder(ctx context.Context, c redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := node.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	return EachMaster(ctx, c, del)
}

// EachMaster runs f on every master of a cluster, at once, or on a
// single Redis: where a scan of every key of c has to go.
func EachMaster(ctx context.Context, c redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	default:
		return fmt.Errorf("cannot scan a %T", c)
	}
}
