package redisstore_test

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

// The cluster tests run against a real Redis Cluster of three masters that
// the test binary starts on loopback ports, once, at first use, and stops
// when the tests end (TestMain). A child process of a multi-process test
// is handed the running cluster's addresses in clusterEnv instead.
const clusterEnv = "IDEMGEN_REDISSTORE_CLUSTER"

// clusterMasters is the size of the cluster: the smallest Redis Cluster
// with more than one shard, so that records land on different nodes.
const clusterMasters = 3

var cluster struct {
	once  sync.Once
	addrs []string
	err   error
	procs []*exec.Cmd
	dir   string
}

// clusterAddrs returns the addresses of the test cluster's masters,
// starting it if it is not running. Without redis-server it skips, unless
// urlEnv is set: then Redis is expected on this machine, and a cluster that
// cannot start is a failure.
func clusterAddrs(t testing.TB) []string {
	t.Helper()
	if v := os.Getenv(clusterEnv); v != "" {
		return strings.Split(v, ",")
	}
	cluster.once.Do(func() { cluster.addrs, cluster.err = startCluster() })
	if cluster.err != nil {
		if errors.Is(cluster.err, exec.ErrNotFound) && os.Getenv(urlEnv) == "" {
			t.Skipf("no Redis Cluster: %v (install redis-server and redis-cli, or set %s to make this a failure)", cluster.err, urlEnv)
		}
		t.Fatalf("start a Redis Cluster: %v", cluster.err)
	}
	return cluster.addrs
}

// startCluster starts clusterMasters redis-server processes in cluster mode
// on free loopback ports, joins them with redis-cli --cluster create, and
// waits until every node reports cluster_state:ok.
func startCluster() ([]string, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "idemgen-redis-cluster-")
	if err != nil {
		return nil, err
	}
	cluster.dir = dir
	var addrs []string
	for i := range clusterMasters {
		addr, err := startNode(dir, i)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := waitClusterOK(addrs, 30*time.Second); err != nil {
		return nil, err
	}
	return addrs, nil
}

// startNode starts one cluster node on a free port and waits until it
// answers PING. A port (or its cluster bus port, 10000 above it) that
// another process takes in between makes the node fail to start; it is
// tried again on another port.
func startNode(dir string, i int) (string, error) {
	var lastErr error
	for range 10 {
		port := 20000 + rand.IntN(10000)
		if !portFree(port) || !portFree(port+10000) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d-%d", i, port))
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
		cluster.procs = append(cluster.procs, cmd)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if err := waitPing(addr, exited); err != nil {
			lastErr = err
			_ = cmd.Process.Kill()
			continue
		}
		return addr, nil
	}
	return "", fmt.Errorf("no cluster node started on a free port: %w", lastErr)
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

func waitPing(addr string, exited <-chan error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
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

// stopCluster stops the cluster's servers, if the tests started any, and
// removes their files.
func stopCluster() {
	for _, cmd := range cluster.procs {
		_ = cmd.Process.Kill()
	}
	if cluster.dir != "" {
		// The servers may still be writing their logs for a moment.
		for range 50 {
			if os.RemoveAll(cluster.dir) == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
