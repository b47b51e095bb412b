//go:build unix

package redisstore_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore/redistest"
)

// startCluster starts a cluster of three masters, stopped when the test
// ends; the test is skipped without redis-server.
func startCluster(t *testing.T) []string {
	t.Helper()
	addrs, stop, err := redistest.StartCluster(3)
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addrs
}

// clusterNodes connects to each of addrs, closed when the test ends, and
// returns the clients and the nodes' IDs by address.
func clusterNodes(t *testing.T, addrs []string) (map[string]*redis.Client, map[string]string) {
	t.Helper()
	nodes, ids := map[string]*redis.Client{}, map[string]string{}
	for _, a := range addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = n.Close() })
		id, err := n.Do(context.Background(), "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		nodes[a], ids[a] = n, id
	}
	return nodes, ids
}

// holder is the node of nodes, among addrs, that holds key.
func holder(t *testing.T, nodes map[string]*redis.Client, addrs []string, key string) string {
	t.Helper()
	for _, a := range addrs {
		if nodes[a].Exists(context.Background(), key).Val() == 1 {
			return a
		}
	}
	t.Fatalf("no node holds %s", key)
	return ""
}

// beginMigration marks slot as moving from src to dst, as redis-cli
// --cluster reshard does before it moves the keys (IMPORTING on the
// target, then MIGRATING on the source), and returns a func that moves
// one key; the slot is handed to dst when the test ends.
func beginMigration(t *testing.T, nodes map[string]*redis.Client, ids map[string]string, slot int64, src, dst string) func(key string) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(nodes[dst].Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src]).Err())
	must(nodes[src].Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst]).Err())
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst]).Err()
		}
	})
	host, port, _ := net.SplitHostPort(dst)
	return func(key string) {
		t.Helper()
		must(nodes[src].Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", key).Err())
	}
}

// phaseNames are the names of ps.
func phaseNames(ps []idemstore.PhaseRecord) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// While the slot of a request's phases migrates to another master (a
// reshard: IMPORTING on the target, MIGRATING on the source, then MIGRATE
// key by key), ListPhases lists every phase, those the source still holds
// and those already moved, which the source's SCAN does not see: what
// `idemgen keys show` prints of a fail-closed key tells an operator which
// calls its request made, and a phase left out reads as a call not made.
func TestListPhasesDuringSlotMigrationListsMovedPhases(t *testing.T) {
	addrs := startCluster(t)
	ctx := context.Background()
	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-phase-migrate")
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	for _, name := range []string{"charge", "ship"} {
		if _, err := s.RecordPhase(ctx, id, name, []byte("done"), time.Hour); err != nil {
			t.Fatalf("record %s: %v", name, err)
		}
	}
	want := []string{"charge", "ship"}
	if ps, err := s.ListPhases(ctx, id); err != nil || !slices.Equal(phaseNames(ps), want) {
		t.Fatalf("before the reshard: %+v, %v; want %v", ps, err, want)
	}
	nodes, ids := clusterNodes(t, addrs)
	charge := s.PhaseKey(id, "charge")
	src := holder(t, nodes, addrs, charge)
	dst := addrs[0]
	if dst == src {
		dst = addrs[1]
	}
	move := beginMigration(t, nodes, ids, nodes[src].ClusterKeySlot(ctx, charge).Val(), src, dst)
	for i, key := range []string{"", charge, s.PhaseKey(id, "ship")} {
		if key != "" {
			move(key)
		}
		ps, err := s.ListPhases(ctx, id)
		if err != nil || !slices.Equal(phaseNames(ps), want) {
			t.Errorf("ListPhases while the slot migrates, %d of the phases moved: %v, %v; want %v", i, phaseNames(ps), err, want)
		}
	}
}

// joinCluster makes the lone node fresh a master of the cluster of addrs
// that serves no slot, as a node added to take load is before the
// reshard, and waits until every node knows it.
func joinCluster(t *testing.T, nodes map[string]*redis.Client, ids map[string]string, addrs []string, fresh string) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(fresh)
	if err := nodes[addrs[0]].Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		known := 0
		for _, a := range addrs {
			if strings.Contains(lineOf(nodes[a].ClusterNodes(ctx).Val(), ids[fresh]), "connected") {
				known++
			}
		}
		if strings.Count(nodes[fresh].ClusterNodes(ctx).Val(), "connected") == len(addrs)+1 && known == len(addrs) &&
			strings.Contains(nodes[fresh].ClusterInfo(ctx).Val(), "cluster_state:ok") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the new node did not join")
		}
	}
}

// lineOf is the line of CLUSTER NODES text that starts with id.
func lineOf(text, id string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, id) {
			return line
		}
	}
	return ""
}

// While a slot moves to a master added to the cluster, which serves no
// slot yet, go-redis's slot map (CLUSTER SLOTS) does not name that master
// and the source still says it serves the slot, so the slots of the
// masters walked cover the cluster. Scan and Stats (`idemgen keys list`,
// `stats`) still never return a listing that lacks the records already
// moved: they fail, naming the migration. ListPhases lists the phases
// moved from the new master.
func TestListingsWhileASlotMovesToANewMasterAreNeverShort(t *testing.T) {
	addrs := startCluster(t)
	ctx := context.Background()
	fresh, stopFresh, err := redistest.StartNode()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFresh)
	all := append(slices.Clone(addrs), fresh)
	nodes, ids := clusterNodes(t, all)
	joinCluster(t, nodes, ids, addrs, fresh)

	c := newClusterClient(t, addrs)
	s, id, claim := clusterStore(t, c, "k-reshard-new-node")
	if res, err := claim("t1"); err != nil || !res.Won {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if _, err := s.RecordPhase(ctx, id, "charge", []byte("done"), time.Hour); err != nil {
		t.Fatal(err)
	}
	count := func() (int, error) {
		n := 0
		err := s.Scan(ctx, idemadmin.Query{IncludeExpired: true}, func(e idemadmin.Entry) bool {
			if e.Tenant == id.Tenant && e.Key == id.Key {
				n++
			}
			return true
		})
		return n, err
	}
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("before the reshard: %d records, %v", n, err)
	}
	record := s.Key(id)
	src := holder(t, nodes, addrs, record)
	move := beginMigration(t, nodes, ids, nodes[src].ClusterKeySlot(ctx, record).Val(), src, fresh)
	move(record)
	move(s.PhaseKey(id, "charge"))

	n, err := count()
	if err == nil || !strings.Contains(err.Error(), "migrating") {
		t.Errorf("Scan while the slot moves to a new master: %d records of the key, %v; want an error naming the migration, not a listing returned short", n, err)
	}
	if st, err := s.Stats(ctx); err == nil || !strings.Contains(err.Error(), "migrating") {
		t.Errorf("Stats while the slot moves to a new master: %+v, %v; want an error naming the migration", st, err)
	}
	if ps, err := s.ListPhases(ctx, id); err != nil || !slices.Equal(phaseNames(ps), []string{"charge"}) {
		t.Errorf("ListPhases while the slot moves to a new master: %v, %v; want the charge, listed from there", phaseNames(ps), err)
	}
}
