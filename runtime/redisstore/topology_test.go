//go:build unix

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// TestEdgeSlotMigrationDuringClaim moves the slot of a record in flight
// from one master to another while its request runs (a resharding, as
// redis-cli --cluster reshard does it): a copy of the request meets the
// claim at every step (migrating, key moved, slot handed over), and the
// holder's completion lands where the record went.
//
// With WithReplicaAck the store sends each script, and WAIT behind it, on
// the connection of one node rather than through the ClusterClient, so it
// must follow the ASK and MOVED redirections of a migration itself: the
// copy's claim and the holder's completion reach the record wherever it
// is at each step.
func TestEdgeSlotMigrationDuringClaim(t *testing.T) {
	t.Run("plain", func(t *testing.T) { slotMigrationDuringClaim(t) })
	t.Run("WithReplicaAck", func(t *testing.T) {
		slotMigrationDuringClaim(t, redisstore.WithReplicaAck(0, 100*time.Millisecond))
	})
}

func slotMigrationDuringClaim(t *testing.T, opts ...redisstore.Option) {
	addrs, stop, err := redistest.StartCluster(3)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop) // after the prefix's keys are deleted
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-migrate", opts...)
	// copyMeets checks that a copy of the request, claiming with token
	// tok, finds the key in state want.
	copyMeets := func(step, tok string, want idemstore.State) {
		t.Helper()
		res, err := claim(tok)
		if err != nil || res.Won || res.Existing.State != want {
			t.Errorf("%s: copy's claim: %+v, %v; want it lost to a record %s", step, res, err, want)
		}
	}
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	// The record's name, its slot, and the two masters.
	nodes := map[string]*redis.Client{}
	ids := map[string]string{}
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		defer n.Close()
		nodes[a] = n
		ids[a] = n.Do(ctx, "CLUSTER", "MYID").Val().(string)
	}
	name := s.Key(id)
	slot := nodes[addrs[0]].ClusterKeySlot(ctx, name).Val()
	var src, dst string
	for _, a := range addrs {
		if nodes[a].Exists(ctx, name).Val() == 1 {
			src = a
		}
	}
	if src == "" {
		t.Fatal("record not found")
	}
	for _, a := range addrs {
		if a != src {
			dst = a
		}
	}
	t.Logf("record %s in slot %d on %s, moving to %s", name, slot, src, dst)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(nodes[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src]).Err())
	must(nodes[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst]).Err())
	copyMeets("slot MIGRATING", "t2", idemstore.StateInFlight)
	host, port, _ := net.SplitHostPort(dst)
	must(nodes[src].Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", name).Err())
	copyMeets("record MIGRATEd", "t3", idemstore.StateInFlight)
	resp := idemstore.Response{Status: 201, Body: []byte(`{"id":1}`)}
	completed := s.Complete(ctx, id, "t1", resp)
	if completed != nil {
		t.Errorf("the holder's completion while the slot migrates: %v", completed)
	}
	for _, a := range addrs {
		must(nodes[a].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst]).Err())
	}
	if completed != nil {
		// The completion is lost: the holder has nothing left to try.
		copyMeets("slot handed over", "t4", idemstore.StateInFlight)
		// How long the key stays out of reach once the slot has moved.
		moved := time.Now()
		for i := 0; time.Since(moved) < 20*time.Second; i++ {
			if _, err := claim(fmt.Sprint("t5-", i)); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("claims of the key failed for %v after the slot moved", time.Since(moved).Round(100*time.Millisecond))
		return
	}
	copyMeets("slot handed over", "t4", idemstore.StateCompleted)
}

// TestEdgeManualFailoverDuringClaim fails the master of a record in flight
// over to its replica with CLUSTER FAILOVER, the coordinated failover of a
// maintenance, which loses no write: the copy of the request meets the
// claim, and the holder's completion lands on the new master. With
// WithReplicaAck the old master's MOVED must send the write to the new
// master at once, not once go-redis reloads its slot map on its own
// (every 60 s by default, ClusterStateReloadInterval); when it does not,
// the loop below measures for how long claims of the key fail, up to
// 20 s.
func TestEdgeManualFailoverDuringClaim(t *testing.T) {
	t.Run("plain", func(t *testing.T) { manualFailoverDuringClaim(t) })
	t.Run("WithReplicaAck", func(t *testing.T) {
		manualFailoverDuringClaim(t, redisstore.WithReplicaAck(1, time.Second))
	})
}

func manualFailoverDuringClaim(t *testing.T, opts ...redisstore.Option) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-failover", opts...)
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	// The replica of the record's master takes over.
	_, replica := recordNodes(t, addrs)
	if err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	awaitTakeover(t, replica)
	failedOver := time.Now()
	res, err := claim("t2")
	if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
		t.Errorf("copy's claim after the failover: %+v, %v; want it lost to the claim in flight", res, err)
	}
	if err := s.Complete(ctx, id, "t1", idemstore.Response{Status: 201}); err != nil {
		t.Errorf("the holder's completion after the failover: %v", err)
		for i := 0; time.Since(failedOver) < 20*time.Second; i++ {
			if _, err := claim(fmt.Sprint("t3-", i)); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("claims of the key failed for %v after the failover", time.Since(failedOver).Round(100*time.Millisecond))
	}
}

// TestReplicaAckResendsAfterBrokenConnection breaks the connection of a
// completion while its WAIT waits for the replica, after the script has
// run on the master. Sent again, the completion finds its own earlier run
// and answers as that run did, once the replica has it: a connection that
// breaks under WithReplicaAck on a cluster neither loses the completion
// nor stores it twice.
func TestReplicaAckResendsAfterBrokenConnection(t *testing.T) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-broken", redisstore.WithReplicaAck(1, 2*time.Second))
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	master, replica := recordNodes(t, addrs)
	m := redis.NewClient(&redis.Options{Addr: master})
	t.Cleanup(func() { _ = m.Close() })
	// A stopped replica acknowledges nothing, so the completion's WAIT
	// blocks on the master until its connection is killed.
	pid := processID(t, replica)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	completed := make(chan error, 1)
	go func() { completed <- s.Complete(ctx, id, "t1", idemstore.Response{Status: 201}) }()
	waiting := ""
	for deadline := time.Now().Add(10 * time.Second); waiting == ""; time.Sleep(10 * time.Millisecond) {
		list, err := m.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=wait ") {
				waiting = strings.TrimPrefix(strings.Fields(line)[0], "id=")
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the completion's WAIT never blocked on the master")
		}
	}
	if st := m.HGet(ctx, s.Key(id), "st").Val(); st != "completed" {
		t.Fatalf("record before the connection breaks: %q, want completed (the script ran)", st)
	}
	if err := m.Do(ctx, "CLIENT", "KILL", "ID", waiting).Err(); err != nil {
		t.Fatal(err)
	}
	resume()
	if err := <-completed; err != nil {
		t.Errorf("the holder's completion whose connection broke: %v", err)
	}
	if res, err := claim("t2"); err != nil || res.Won || res.Existing.State != idemstore.StateCompleted {
		t.Errorf("copy's claim: %+v, %v; want it lost to the completed record", res, err)
	}
}

// TestReplicaAckAfterMasterCrash kills the master of a record in flight;
// its replica, which acknowledged the claim, takes over once the cluster
// sees the master fail. A write under WithReplicaAck that finds the old
// master gone must have the slot map reloaded, so that the requests after
// the failover reach the new master within moments rather than when
// go-redis reloads the map on its own (every 60 s by default).
func TestReplicaAckAfterMasterCrash(t *testing.T) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-crash", redisstore.WithReplicaAck(1, time.Second))
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	master, replica := recordNodes(t, addrs)
	m := redis.NewClient(&redis.Options{Addr: master})
	t.Cleanup(func() { _ = m.Close() })
	if err := syscall.Kill(processID(t, m), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitTakeover(t, replica)
	// The new master has no replica left, so the store that waits for
	// none tells where the writes go.
	s0, err := redisstore.New(c, redisstore.WithPrefix(prefixOf(t, s)), redisstore.WithReplicaAck(0, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	failedOver := time.Now()
	var res idemstore.Result
	for i := 0; time.Since(failedOver) < 20*time.Second; i++ {
		if res, err = claimOn(s0, id)(fmt.Sprint("t2-", i)); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(failedOver)
	t.Logf("claims of the key failed for %v after the failover", took.Round(100*time.Millisecond))
	if err != nil || res.Won || res.Existing.State != idemstore.StateInFlight {
		t.Fatalf("copy's claim after the failover: %+v, %v; want it lost to the claim in flight", res, err)
	}
	if took > 5*time.Second {
		t.Errorf("claims of the key failed for %v after the failover, want the new master found within 5s", took)
	}
	if err := s0.Complete(ctx, id, "t1", idemstore.Response{Status: 201}); err != nil {
		t.Errorf("the holder's completion after the failover: %v", err)
	}
}

// awaitTakeover waits up to 30 s for replica to become a master.
func awaitTakeover(t *testing.T, replica *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if role, _ := replica.Do(context.Background(), "ROLE").Slice(); len(role) > 0 && role[0] == "master" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take over")
		}
	}
}

// processID returns the process ID of the Redis server n talks to.
func processID(t *testing.T, n *redis.Client) int {
	t.Helper()
	info, err := n.InfoMap(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(info["Server"]["process_id"])
	if err != nil {
		t.Fatalf("process_id: %v", err)
	}
	return pid
}

// newClusterClient returns a client of the cluster at addrs, closed when
// the test ends.
func newClusterClient(t *testing.T, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clusterStore returns a store on c, the identity of key, and its claim
// (claimOn).
func clusterStore(t *testing.T, c *redis.ClusterClient, key string, opts ...redisstore.Option) (*redisstore.Store, idemstore.Identity, func(tok string) (idemstore.Result, error)) {
	t.Helper()
	s := storeOn(t, c, opts...)
	id := idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: key}
	return s, id, claimOn(s, id)
}

// claimOn returns a claim of id on s by a copy of one request, with token
// tok.
func claimOn(s *redisstore.Store, id idemstore.Identity) func(tok string) (idemstore.Result, error) {
	return func(tok string) (idemstore.Result, error) {
		return s.Claim(context.Background(), idemstore.Claim{Identity: id, Operation: "createTransfer", Fingerprint: []byte("fp"),
			Token: tok, Lease: time.Minute, TTL: time.Hour, OnLeaseExpiry: idemstore.FailClosed})
	}
}

// startReplicatedCluster starts a cluster of three masters with a replica
// each, stopped when the test ends, and waits until every replica is in
// sync.
func startReplicatedCluster(t *testing.T) []string {
	t.Helper()
	addrs, stop, err := redistest.StartReplicatedCluster(3, 1)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		synced := 0
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			role, _ := n.Do(ctx, "ROLE").Slice()
			_ = n.Close()
			if len(role) >= 4 && role[0] == "slave" && role[3] == "connected" {
				synced++
			}
		}
		if synced == len(addrs)/2 {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatal("replicas not in sync")
		}
	}
}

// recordNodes returns the address of the master that holds the test's
// only record, and a client of its replica.
func recordNodes(t *testing.T, addrs []string) (master string, replica *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		keys, _ := n.Keys(ctx, "idemtest:*").Result()
		role, _ := n.Do(ctx, "ROLE").Slice()
		_ = n.Close()
		if len(keys) == 1 && len(role) > 0 && role[0] == "master" {
			master = a
		}
	}
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = n.Close() })
		role, _ := n.Do(ctx, "ROLE").Slice()
		if len(role) >= 3 && role[0] == "slave" && net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) == master {
			replica = n
		}
	}
	if master == "" || replica == nil {
		t.Fatalf("no master (%q) or replica of the record", master)
	}
	return master, replica
}

// TestListPhasesAfterFailover fails the master of a request's phases over
// to its replica with CLUSTER FAILOVER, while the store's client still
// holds the slot map from before: the map names the old master, now a
// replica, which answers a SCAN with its copy of the keys and the reads
// of each key with MOVED. ListPhases must reach the new master and list
// every recorded phase, with no reload of the map beforehand.
func TestListPhasesAfterFailover(t *testing.T) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, _ := clusterStore(t, c, "k-phases-failover")
	names := []string{"charge", "notify", "reserve"}
	for _, name := range names {
		if _, err := s.RecordPhase(ctx, id, name, []byte("r-"+name), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	master, err := c.MasterForKey(ctx, s.PhaseKey(id, ""))
	if err != nil {
		t.Fatal(err)
	}
	// Every phase is on the replica before it takes over.
	if n, err := master.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	// The old master answers as a replica before the listing runs.
	failOver(t, addrs, master.Options().Addr)
	got, err := s.ListPhases(ctx, id)
	if err != nil {
		t.Fatalf("ListPhases after the failover: %v", err)
	}
	var listed []string
	for _, p := range got {
		listed = append(listed, p.Name)
	}
	if strings.Join(listed, ",") != strings.Join(names, ",") {
		t.Errorf("ListPhases after the failover: %q; want %q", listed, names)
	}
}

// TestScanAfterFailover fails a master over to its replica with CLUSTER
// FAILOVER while the slot map of the store's client still names the old
// master, as it does right after a failover when go-redis reloads the map
// (before each walk of Scan and Stats) from a node not yet told of it;
// here the client's ClusterSlots option answers the map from before, so
// that it stays stale. The old master, now a replica, holds a copy of the
// records written before the failover, whose reads answer MOVED, and none
// of those written after its replication was cut, which its SCAN leaves
// out without a word. Scan and Stats must list every record of both, on
// the new master.
func TestScanAfterFailover(t *testing.T) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	// The map from before, once it names every replica: go-redis finds
	// a node by its address only among those its map names.
	var slots []redis.ClusterSlot
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		shards, err := c.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slots = slotMap(shards); !slices.ContainsFunc(slots, func(s redis.ClusterSlot) bool { return len(s.Nodes) < 2 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot map names no replica of some master: %+v", slots)
		}
	}
	stale := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) { return slots, nil }})
	t.Cleanup(func() { _ = stale.Close() })
	// fill writes n records under a fresh prefix through c, and returns
	// a store on stale under that prefix and the name of the first.
	const n = 30
	fill := func() (*redisstore.Store, string) {
		t.Helper()
		prefix := newPrefix(t, c)
		w, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			id := idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: fmt.Sprint("k-", i)}
			if res, err := claimOn(w, id)("t"); err != nil || !res.Won {
				t.Fatalf("claim %d: %+v, %v", i, res, err)
			}
		}
		r, err := redisstore.New(stale, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return r, w.Key(idemstore.Identity{Tenant: "acme", Scope: "createTransfer", Key: "k-0"})
	}
	before, first := fill()
	master, err := c.MasterForKey(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Do(ctx, "WAIT", 1, 5000).Err()
	}); err != nil {
		t.Fatal(err)
	}
	// The old master answers as a replica, and copies nothing more: it
	// cannot authenticate to its new master.
	old := failOver(t, addrs, master.Options().Addr)
	if err := old.ConfigSet(ctx, "masterauth", "not-the-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := old.ClientKillByFilter(ctx, "TYPE", "master").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if role, _ := old.Do(ctx, "ROLE").Slice(); len(role) >= 4 && role[3] != "connected" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old master still copies its new master")
		}
	}
	after, _ := fill()
	for name, s := range map[string]*redisstore.Store{"copied": before, "not copied": after} {
		listed := 0
		err := s.Scan(ctx, idemadmin.Query{}, func(idemadmin.Entry) bool { listed++; return true })
		if err != nil || listed != n {
			t.Errorf("%s: Scan after the failover listed %d records, %v; want %d", name, listed, err, n)
		}
		st, err := s.Stats(ctx)
		counted := int64(0)
		for _, c := range st.Counts {
			counted += c.Keys
		}
		if err != nil || counted != n {
			t.Errorf("%s: Stats after the failover counted %d records, %v; want %d", name, counted, err, n)
		}
	}
}

// slotMap is the slot map of shards, as CLUSTER SLOTS answers it: each
// range's master first, then its replicas.
func slotMap(shards []redis.ClusterShard) []redis.ClusterSlot {
	var out []redis.ClusterSlot
	for _, sh := range shards {
		var nodes []redis.ClusterNode
		for _, n := range sh.Nodes {
			node := redis.ClusterNode{ID: n.ID, Addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))}
			if n.Role == "master" {
				nodes = append([]redis.ClusterNode{node}, nodes...)
			} else {
				nodes = append(nodes, node)
			}
		}
		for _, r := range sh.Slots {
			out = append(out, redis.ClusterSlot{Start: int(r.Start), End: int(r.End), Nodes: nodes})
		}
	}
	return out
}

// failOver fails the master at addr over to its replica among addrs with
// CLUSTER FAILOVER, and returns a client of the old master once it
// answers as a replica.
func failOver(t *testing.T, addrs []string, master string) *redis.Client {
	t.Helper()
	ctx := context.Background()
	var replica *redis.Client
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = n.Close() })
		role, _ := n.Do(ctx, "ROLE").Slice()
		if len(role) >= 3 && role[0] == "slave" && net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) == master {
			replica = n
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", master)
	}
	if err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	awaitTakeover(t, replica)
	old := redis.NewClient(&redis.Options{Addr: master})
	t.Cleanup(func() { _ = old.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if role, _ := old.Do(ctx, "ROLE").Slice(); len(role) > 0 && role[0] == "slave" {
			return old
		}
		if time.Now().After(deadline) {
			t.Fatal("the old master did not become a replica")
		}
	}
}
