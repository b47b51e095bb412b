package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// Every read whose answer decides whether a request runs again finds what
// the key's master holds, through a cluster client configured to read from
// replicas (ReadOnly, RouteByLatency, RouteRandomly) and while the
// master's replicas lag behind it. Replication is asynchronous: a replica
// that has not yet applied a write answers that there is none. A phase's
// record read there would make the next run call the downstream again
// (docs/semantics.md §8.2), a completion read there would run the handler
// again, though no failover happened and the write stands on the master.
// go-redis sends a read-only command such as GET to a replica under those
// options, and a script (EVALSHA) to the master. The operator's reads
// (Get, Scan, ListPhases) are held to the same: an operator resolving a
// key must see its completion and its phases. Each try checks that the
// replicas still lacked the write when it was read.
func TestReadsThroughAReplicaReadingClientFindTheMastersWrites(t *testing.T) {
	addrs := startReplicatedCluster(t)
	ctx := context.Background()
	clients := []struct {
		name string
		opts redis.ClusterOptions
	}{
		{"ReadOnly", redis.ClusterOptions{ReadOnly: true}},
		{"RouteByLatency", redis.ClusterOptions{RouteByLatency: true}},
		{"RouteRandomly", redis.ClusterOptions{RouteRandomly: true}},
	}
	complete := func(s *redisstore.Store, id idemstore.Identity) error {
		res, err := claimOn(s, id)("tok-1")
		if err != nil || !res.Won {
			return fmt.Errorf("claim: %+v, %w", res, err)
		}
		return s.Complete(ctx, id, "tok-1", idemstore.Response{Status: 201, Body: []byte("done")})
	}
	record := func(s *redisstore.Store, id idemstore.Identity) error {
		_, err := s.RecordPhase(ctx, id, "charge", []byte("ch_1"), time.Hour)
		return err
	}
	phaseKey := func(s *redisstore.Store, id idemstore.Identity) string { return s.PhaseKey(id, "charge") }
	reads := []struct {
		name string
		// write runs while the replicas lag and writes key; read returns
		// what it found of the write, which the master holds.
		key   func(s *redisstore.Store, id idemstore.Identity) string
		write func(s *redisstore.Store, id idemstore.Identity) error
		read  func(s *redisstore.Store, id idemstore.Identity) (string, error)
	}{
		{"LoadPhase", phaseKey, record, func(s *redisstore.Store, id idemstore.Identity) (string, error) {
			got, found, err := s.LoadPhase(ctx, id, "charge")
			return fmt.Sprintf("%v %q", found, got), err
		}},
		{"ListPhases", phaseKey, record, func(s *redisstore.Store, id idemstore.Identity) (string, error) {
			got, err := s.ListPhases(ctx, id)
			names := make([]string, 0, len(got))
			for _, p := range got {
				names = append(names, fmt.Sprintf("%s %d", p.Name, p.Bytes))
			}
			return fmt.Sprintf("%v %q", len(got) > 0, strings.Join(names, ",")), err
		}},
		{"Claim", (*redisstore.Store).Key, complete, func(s *redisstore.Store, id idemstore.Identity) (string, error) {
			res, err := claimOn(s, id)("tok-2")
			if res.Existing.Response == nil {
				return fmt.Sprintf("false %q", res.Existing.State), err
			}
			return fmt.Sprintf("%v %q", !res.Won && res.Existing.State == idemstore.StateCompleted, res.Existing.Response.Body), err
		}},
		{"Get", (*redisstore.Store).Key, complete, func(s *redisstore.Store, id idemstore.Identity) (string, error) {
			e, err := s.Get(ctx, id)
			if errors.Is(err, idemadmin.ErrNotFound) {
				return "false \"\"", nil
			}
			return fmt.Sprintf("%v %q", e.State == idemstore.StateCompleted, e.Body), err
		}},
		{"Scan", (*redisstore.Store).Key, complete, func(s *redisstore.Store, id idemstore.Identity) (string, error) {
			var states []string
			err := s.Scan(ctx, idemadmin.Query{Tenant: id.Tenant}, func(e idemadmin.Entry) bool {
				states = append(states, string(e.State))
				return true
			})
			return fmt.Sprintf("%v %q", slices.Equal(states, []string{"completed"}), states), err
		}},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.RouteByLatency && raceDetector {
				// go-redis starts a new node's latency probe before it
				// finishes setting the node up, and the race detector
				// reports that as a race of go-redis's own; the build
				// without the detector runs this client.
				t.Log("RouteByLatency runs in the build without the race detector")
				return
			}
			opts := c.opts
			opts.Addrs = addrs
			rc := redis.NewClusterClient(&opts)
			t.Cleanup(func() { _ = rc.Close() })
			s, err := redisstore.New(rc, redisstore.WithPrefix("idemtest:"))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reads {
				t.Run(r.name, func(t *testing.T) {
					const tries = 3
					missed := 0
					for i := range tries {
						id := idemstore.Identity{Tenant: c.name + "/" + r.name + "/" + fmt.Sprint(i), Scope: "createTransfer", Key: "k 0011"}
						replicas, resume := pauseReplicas(t, rc, s.Key(id))
						if err := r.write(s, id); err != nil {
							resume()
							t.Fatal(err)
						}
						got, err := r.read(s, id)
						lag := lagging(ctx, replicas, r.key(s, id))
						resume()
						if err != nil {
							t.Fatal(err)
						}
						if lag != nil {
							t.Fatalf("try %d proves nothing: %v", i, lag)
						}
						if !strings.HasPrefix(got, "true ") {
							missed++
							t.Logf("try %d: %s found %s", i, r.name, got)
						}
					}
					if missed > 0 {
						t.Errorf("in %d of %d tries %s, through a client that reads from replicas, did not find a write its master holds", missed, tries, r.name)
					}
				})
			}
		})
	}
}

// pauseReplicas holds back the replication stream that the replicas of
// key's master apply, as a replica falls behind under load: CLIENT PAUSE
// WRITE stops a replica's writes, not the reads it serves. The returned
// function resumes them; the pause ends by itself after three seconds.
func pauseReplicas(t *testing.T, rc *redis.ClusterClient, key string) (replicas []*redis.Client, resume func()) {
	t.Helper()
	ctx := context.Background()
	master, err := rc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, masterPort, _ := strings.Cut(master.Options().Addr, ":")
	var paused []*redis.Client
	for deadline := time.Now().Add(10 * time.Second); len(paused) == 0 && time.Now().Before(deadline); {
		rc.ReloadState(ctx)
		time.Sleep(100 * time.Millisecond)
		var mu sync.Mutex
		err = rc.ForEachSlave(ctx, func(ctx context.Context, n *redis.Client) error {
			role, err := n.Do(ctx, "ROLE").Slice()
			if err != nil || len(role) < 3 || fmt.Sprint(role[2]) != masterPort {
				return err
			}
			mu.Lock()
			paused = append(paused, n)
			mu.Unlock()
			return n.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err()
		})
	}
	if err != nil || len(paused) == 0 {
		t.Fatalf("pausing the replicas of %s: %v (%d paused)", master.Options().Addr, err, len(paused))
	}
	return paused, func() {
		for _, n := range paused {
			_ = n.Do(ctx, "CLIENT", "UNPAUSE").Err()
		}
	}
}

// lagging returns an error unless every one of replicas still lacks key:
// a read that found the key then did not find it on a replica.
func lagging(ctx context.Context, replicas []*redis.Client, key string) error {
	for _, n := range replicas {
		if got, err := n.Exists(ctx, key).Result(); err != nil || got != 0 {
			return fmt.Errorf("replica %s holds %s already (%d, %v)", n.Options().Addr, key, got, err)
		}
	}
	return nil
}
