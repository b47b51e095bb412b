package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

var (
	_ idemstore.PhaseStore  = (*Store)(nil)
	_ idemstore.PhaseLister = (*Store)(nil)
)

// recordPhaseScript records a phase unless one stands, and returns the
// result that stands. KEYS[1] is the phase's key; ARGV[1] the result,
// ARGV[2] its ttl in milliseconds. Redis deletes the key when the ttl
// ends, by its own clock (WithClock does not move it).
var recordPhaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  return cur
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`)

// loadPhaseScript reads the phase at KEYS[1]. It is a script, not a GET,
// for where it runs: go-redis sends a read-only command such as GET to a
// replica when a cluster client reads from replicas (ReadOnly,
// RouteByLatency, RouteRandomly), and a replica that has not yet applied
// a recorded phase answers that there is none, so the next run would call
// the downstream again. EVALSHA, not flagged read-only, goes to the key's
// master, where recordPhaseScript wrote. Never run it with RunRO or
// EvalShaRO, which are sent to replicas.
var loadPhaseScript = redis.NewScript(`return redis.call('GET', KEYS[1])`)

// PhaseKey returns the name of the Redis key that holds phase name of the
// request stored under id: the record's key (Key), whose braces keep it in
// the record's hash slot, then ":phase:" and the name. The operator's
// listing, which matches keys that end at the braces, passes over it.
func (s *Store) PhaseKey(id idemstore.Identity, name string) string {
	return s.Key(id) + ":phase:" + name
}

// LoadPhase implements idemstore.PhaseStore. It reads from the phase's
// master whatever replicas the client reads from (loadPhaseScript), in
// one round trip.
func (s *Store) LoadPhase(ctx context.Context, id idemstore.Identity, name string) ([]byte, bool, error) {
	v, err := loadPhaseScript.Run(ctx, s.client, []string{s.PhaseKey(id, name)}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("redisstore: load phase: %w", err)
	}
	return []byte(v), true, nil
}

// RecordPhase implements idemstore.PhaseStore, in one round trip (and the
// replicas' acknowledgement under WithReplicaAck).
func (s *Store) RecordPhase(ctx context.Context, id idemstore.Identity, name string, result []byte, ttl time.Duration) ([]byte, error) {
	if err := idemstore.CheckPhase(name, result, ttl); err != nil {
		return nil, err
	}
	ms := max(ttl.Milliseconds(), 1)
	v, err := s.run(ctx, recordPhaseScript, s.PhaseKey(id, name), result, ms).Text()
	if err != nil {
		return nil, fmt.Errorf("redisstore: record phase: %w", err)
	}
	return []byte(v), nil
}

// PhasesBesideTx implements idemstore.PhaseStore; the store has no
// transactions.
func (s *Store) PhasesBesideTx() bool { return true }

// ListPhases implements idemstore.PhaseLister: it scans the phase keys of
// id in their hash slot's master, by name. ExpiresAt is read off each
// key's remaining time by this process's clock; RecordedAt is not kept.
//
// On a cluster the master is the one go-redis's slot map names, which is
// stale for a while after a failover or a reshard: the node it names may
// have become a replica, or given the slot away. A listing is trusted only
// from a node that answers, after its SCAN, that it is a master and serves
// the slot (listPhasesOn); a node that answers MOVED or ASK, or is a
// replica, sends the listing to the slot's master after a reload of the
// map (redirectList), up to the client's MaxRedirects times.
func (s *Store) ListPhases(ctx context.Context, id idemstore.Identity) ([]idemstore.PhaseRecord, error) {
	prefix := s.PhaseKey(id, "")
	var (
		out []idemstore.PhaseRecord
		err error
	)
	switch c := s.client.(type) {
	case *redis.Client:
		out, err = listPhasesOn(ctx, c, prefix, false)
	case *redis.ClusterClient:
		out, err = listPhasesOnCluster(ctx, c, prefix)
	default:
		err = fmt.Errorf("cannot scan through a %T", s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: list phases: %w", err)
	}
	slices.SortFunc(out, func(a, b idemstore.PhaseRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// errNotMaster is the answer of a node that the slot map names as a
// slot's master and that is a replica.
var errNotMaster = errors.New("the node listed is a replica")

// listPhasesOnCluster lists the phase keys under prefix on the master of
// their slot, following redirections (redirectList).
func listPhasesOnCluster(ctx context.Context, cc *redis.ClusterClient, prefix string) ([]idemstore.PhaseRecord, error) {
	node, err := cc.MasterForKey(ctx, prefix)
	if err != nil {
		return nil, err
	}
	for redirects := 0; ; redirects++ {
		out, err := listPhasesOn(ctx, node, prefix, true)
		if err == nil || redirects >= cc.Options().MaxRedirects {
			return out, err
		}
		next, ok := redirectList(ctx, cc, prefix, node, err)
		if !ok {
			return nil, err
		}
		node = next
	}
}

// redirectList returns the node to list again on after node failed the
// listing with err, and false when err is no redirection. The slot map
// is reloaded at once (nodeAt; ReloadState only schedules a reload):
//
//   - MOVED: the node the reply names, which a failover or the end of a
//     reshard made the slot's master.
//   - ASK: the slot is migrating and a key has left node. The listing
//     goes to the slot's master again, after a pause that lets the
//     migration end.
//   - a replica (errNotMaster, or READONLY): the slot's master in the
//     reloaded map, once it names another node than the replica; the map
//     is reloaded again, for a while, until it does.
func redirectList(ctx context.Context, cc *redis.ClusterClient, prefix string, node *redis.Client, err error) (*redis.Client, bool) {
	if addr, moved := redis.IsMovedError(err); moved {
		if target, lookErr := nodeAt(ctx, cc, addr); lookErr == nil && target != nil {
			return target, true
		}
	}
	_, ask := redis.IsAskError(err)
	_, moved := redis.IsMovedError(err)
	if !ask && !moved && !errors.Is(err, errNotMaster) && !redis.IsReadOnlyError(err) {
		return nil, false
	}
	stale := hostPort(node.Options().Addr)
	for deadline := time.Now().Add(redirectWait); ; {
		if cc.ForEachShard(ctx, func(context.Context, *redis.Client) error { return nil }) != nil {
			return nil, false // ForEachShard reloads the map first
		}
		next, lookErr := cc.MasterForKey(ctx, prefix)
		if lookErr != nil {
			return nil, false
		}
		if ask || hostPort(next.Options().Addr) != stale || time.Now().After(deadline) {
			if ask {
				sleepCtx(ctx, redirectPause)
			}
			return next, ctx.Err() == nil
		}
		if !sleepCtx(ctx, redirectPause) {
			return nil, false
		}
	}
}

const (
	// redirectWait bounds how long redirectList reloads the slot map
	// for one that no longer names a replica as the slot's master.
	redirectWait = 2 * time.Second
	// redirectPause is the pause between two reloads of redirectList.
	redirectPause = 100 * time.Millisecond
)

// sleepCtx sleeps for d, or until ctx ends; it reports whether ctx is
// still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// listPhasesOn lists the phase keys under prefix on node. When cluster,
// the listing is checked to come from the slot's master after its SCAN:
// a replica whose slot map is stale would answer a SCAN with what it has
// (nothing, or what it has copied), and a replica that serves reads
// (READONLY) answers STRLEN too. ROLE says whether node is a master, and
// EXISTS on prefix's own name (no key) answers MOVED on a master that no
// longer serves the slot. ASK, the answer of the slot's master while the
// slot migrates, passes: the listing holds the keys not yet moved.
func listPhasesOn(ctx context.Context, node *redis.Client, prefix string, cluster bool) ([]idemstore.PhaseRecord, error) {
	var out []idemstore.PhaseRecord
	iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		n, err := node.StrLen(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		ttl, err := node.PTTL(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if ttl < 0 {
			continue // gone between the scan and the read
		}
		out = append(out, idemstore.PhaseRecord{Name: strings.TrimPrefix(k, prefix), Bytes: int(n), ExpiresAt: time.Now().Add(ttl)})
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	if !cluster {
		return out, nil
	}
	role, err := node.Do(ctx, "ROLE").Slice()
	if err != nil {
		return nil, err
	}
	if len(role) == 0 || role[0] != "master" {
		return nil, fmt.Errorf("%w: %s", errNotMaster, node.Options().Addr)
	}
	if err := node.Exists(ctx, prefix).Err(); err != nil {
		if _, ask := redis.IsAskError(err); !ask {
			return nil, err
		}
	}
	return out, nil
}
