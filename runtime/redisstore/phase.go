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
// stale for a while after a failover or a reshard; the listing follows
// onMaster's rule, as Scan and Stats do. While the slot migrates, the
// phases already moved are listed from the node importing it
// (listImported).
func (s *Store) ListPhases(ctx context.Context, id idemstore.Identity) ([]idemstore.PhaseRecord, error) {
	prefix := s.PhaseKey(id, "")
	var (
		out []idemstore.PhaseRecord
		err error
	)
	switch c := s.client.(type) {
	case *redis.Client:
		out, err = listPhasesOn(ctx, c, prefix)
	case *redis.ClusterClient:
		var node *redis.Client
		if node, err = c.MasterForKey(ctx, prefix); err == nil {
			master := func(ctx context.Context) (*redis.Client, error) { return c.MasterForKey(ctx, prefix) }
			list := func(ctx context.Context, node *redis.Client) ([]idemstore.PhaseRecord, error) {
				return listPhasesOn(ctx, node, prefix)
			}
			var view nodeView
			out, node, view, err = onMaster(ctx, c, node, keySlot(prefix), master, list)
			if err == nil {
				out, err = listImported(ctx, c, node, view, keySlot(prefix), prefix, out)
			}
		}
	default:
		err = fmt.Errorf("cannot scan through a %T", s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: list phases: %w", err)
	}
	slices.SortFunc(out, func(a, b idemstore.PhaseRecord) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listImported adds to out, the phases listed on node, those of the
// slot's keys that node, by its account view, has already moved to the
// node importing the slot: that node is listed after node, so that a key
// moved in between is found there, and a key listed on both counts once.
// The importing node must then say that it is a master that imports or
// serves the slot. go-redis's slot map does not name a node that serves
// no slot yet, so that node is reached with node's options.
func listImported(ctx context.Context, cc *redis.ClusterClient, node *redis.Client, view nodeView, slot int, prefix string, out []idemstore.PhaseRecord) ([]idemstore.PhaseRecord, error) {
	i := slices.IndexFunc(view.migrating, func(m migration) bool { return m.slot == slot })
	if i < 0 {
		return out, nil
	}
	m := view.migrating[i]
	if m.to == "" {
		return nil, &migratingError{m}
	}
	target, err := nodeAt(ctx, cc, m.to)
	if err != nil {
		return nil, err
	}
	if target == nil {
		opt := *node.Options()
		opt.Addr = m.to
		if opt.MaintNotificationsConfig != nil {
			mc := *opt.MaintNotificationsConfig
			opt.MaintNotificationsConfig = &mc
		}
		target = redis.NewClient(&opt)
		defer target.Close()
	}
	moved, err := listPhasesAsking(ctx, target, prefix, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", &migratingError{m}, err)
	}
	tv, err := served(ctx, target, -1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", &migratingError{m}, err)
	}
	if !tv.holds(slot) {
		return nil, fmt.Errorf("%w: that node neither imports nor serves the slot", &migratingError{m})
	}
	for _, p := range moved {
		if !slices.ContainsFunc(out, func(q idemstore.PhaseRecord) bool { return q.Name == p.Name }) {
			out = append(out, p)
		}
	}
	return out, nil
}

// listPhasesOn lists the phase keys under prefix on node. On a cluster,
// onMaster checks afterwards that node was the slot's master: a replica
// that serves reads (READONLY) answers STRLEN too.
func listPhasesOn(ctx context.Context, node *redis.Client, prefix string) ([]idemstore.PhaseRecord, error) {
	return listPhasesAsking(ctx, node, prefix, false)
}

// listPhasesAsking is listPhasesOn, each read behind ASKING when asking,
// for a node that imports the keys' slot and would answer MOVED without.
// ASKING holds for the next command only, so each read goes with its own,
// in one pipeline on one connection.
func listPhasesAsking(ctx context.Context, node *redis.Client, prefix string, asking bool) ([]idemstore.PhaseRecord, error) {
	var out []idemstore.PhaseRecord
	iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		var (
			n   *redis.IntCmd
			ttl *redis.DurationCmd
		)
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "ASKING")
			}
			n = p.StrLen(ctx, k)
			if asking {
				p.Do(ctx, "ASKING")
			}
			ttl = p.PTTL(ctx, k)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if ttl.Val() < 0 {
			continue // gone between the scan and the read
		}
		out = append(out, idemstore.PhaseRecord{Name: strings.TrimPrefix(k, prefix), Bytes: int(n.Val()), ExpiresAt: time.Now().Add(ttl.Val())})
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
