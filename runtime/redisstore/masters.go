package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The listings of a cluster (ListPhases, Scan, Stats) run SCAN on the
// connection of one node, which follows no redirection, and that node is
// the master that go-redis's slot map names. The map is stale for a while
// after a failover or a reshard (for good, when the client's ClusterSlots
// option answers it): the node may have become a replica, which answers a
// SCAN with its copy of the keys, or with nothing, or have given slots
// away. onMaster holds the one rule the three listings follow: a listing
// is trusted only from a node that says, after it, that it is a master
// and which slots it serves; any other answer sends the listing to the
// node that serves them.

// numSlots is the number of hash slots of a Redis Cluster.
const numSlots = 16384

// keySlot is the hash slot of key, as Redis Cluster computes it: CRC16
// (XMODEM) of the key's hash tag, or of the whole key when it has none.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % numSlots
}

// slotRange is the slots from first to last, both included.
type slotRange struct{ first, last int }

// elsewhereError is the answer of a node that a listing cannot trust: a
// replica, or a master that does not serve the listing's slot. to is the
// node it names instead (its master, or the slot's), empty when it names
// none.
type elsewhereError struct {
	node, to string
	replica  bool
}

func (e *elsewhereError) Error() string {
	if e.replica {
		return fmt.Sprintf("the node listed, %s, is a replica of %q", e.node, e.to)
	}
	return fmt.Sprintf("the node listed, %s, does not serve the slot (%q does)", e.node, e.to)
}

// nodeView is a node's account of itself (served): the slots it serves
// and the migrations of slots in progress on it.
type nodeView struct {
	slots []slotRange
	// migrating are the slots the node is moving to another node, whose
	// keys already moved are there; importing the slots it is taking in.
	migrating []migration
	importing []int
}

// migration is a slot that node from is moving to node to (its address,
// empty when from's CLUSTER NODES names no such node), whose ID is toID.
type migration struct {
	slot           int
	from, to, toID string
}

// migratingError is the answer of a node that is migrating a slot a
// listing covers: the keys already moved are on the node importing it.
type migratingError struct{ migration }

func (e *migratingError) Error() string {
	to := e.to
	if to == "" {
		to = "a node it does not know"
	}
	return fmt.Sprintf("slot %d is migrating from %s to %s (node %s): the listing would lack the keys already moved; list again once the migration has ended", e.slot, e.from, to, e.toID)
}

// served returns node's account of itself (CLUSTER NODES, its "myself"
// line), and an elsewhereError when it is a replica or, with slot ≥ 0,
// does not serve slot. A slot that node is migrating away is still its
// own (its keys not yet moved answer there, the others ASK) and is listed
// in migrating too; a slot it is importing is not yet its own.
func served(ctx context.Context, node *redis.Client, slot int) (nodeView, error) {
	text, err := node.ClusterNodes(ctx).Result()
	if err != nil {
		return nodeView{}, err
	}
	type entry struct {
		addr, master string
		self, slave  bool
		view         nodeView
	}
	byID := map[string]entry{}
	var self string
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		e := entry{addr: f[1], master: f[3]}
		if i := strings.IndexAny(e.addr, "@,"); i >= 0 {
			e.addr = e.addr[:i]
		}
		for flag := range strings.SplitSeq(f[2], ",") {
			e.self = e.self || flag == "myself"
			e.slave = e.slave || flag == "slave"
		}
		for _, tok := range f[8:] {
			if strings.HasPrefix(tok, "[") {
				// A migration in progress: [slot->-id] moves slot to
				// node id, [slot-<-id] takes it in from node id.
				if err := e.view.marker(tok); err != nil {
					return nodeView{}, err
				}
				continue
			}
			lo, hi, isRange := strings.Cut(tok, "-")
			if !isRange {
				hi = lo
			}
			first, err1 := strconv.Atoi(lo)
			last, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nodeView{}, fmt.Errorf("CLUSTER NODES: slots %q", tok)
			}
			e.view.slots = append(e.view.slots, slotRange{first, last})
		}
		byID[f[0]] = e
		if e.self {
			self = f[0]
		}
	}
	me, ok := byID[self]
	if !ok {
		return nodeView{}, errors.New("CLUSTER NODES: no line for the node itself")
	}
	addr := node.Options().Addr
	if me.slave {
		return nodeView{}, &elsewhereError{node: addr, to: byID[me.master].addr, replica: true}
	}
	for i := range me.view.migrating {
		m := &me.view.migrating[i]
		m.from, m.to = addr, byID[m.toID].addr
	}
	if slot < 0 {
		return me.view, nil
	}
	for id, e := range byID {
		for _, r := range e.view.slots {
			if r.first <= slot && slot <= r.last {
				if id == self {
					return me.view, nil
				}
				return nodeView{}, &elsewhereError{node: addr, to: e.addr}
			}
		}
	}
	return nodeView{}, &elsewhereError{node: addr}
}

// marker adds the migration that tok, a bracketed entry of CLUSTER NODES,
// describes to v.
func (v *nodeView) marker(tok string) error {
	body := strings.TrimSuffix(strings.TrimPrefix(tok, "["), "]")
	slotText, id, out := strings.Cut(body, "->-")
	if !out {
		slotText, id, _ = strings.Cut(body, "-<-")
	}
	slot, err := strconv.Atoi(slotText)
	if err != nil || id == "" {
		return fmt.Errorf("CLUSTER NODES: migration %q", tok)
	}
	if out {
		v.migrating = append(v.migrating, migration{slot: slot, toID: id})
	} else {
		v.importing = append(v.importing, slot)
	}
	return nil
}

// holds reports whether v serves slot or is importing it.
func (v nodeView) holds(slot int) bool {
	for _, r := range v.slots {
		if r.first <= slot && slot <= r.last {
			return true
		}
	}
	return slices.Contains(v.importing, slot)
}

// onMaster runs list on node, the master that cc's slot map names for
// slot (any slot of node's, when slot < 0), and trusts what it listed only
// when node says afterwards (served) that it is a master and serves slot.
// It returns the listing, the node that made it and that node's account
// of itself (served). Otherwise the listing runs again, up to the client's
// MaxRedirects times, on the node redirectList picks; master returns the
// slot's master in the map as it stands.
func onMaster[T any](ctx context.Context, cc *redis.ClusterClient, node *redis.Client, slot int,
	master func(context.Context) (*redis.Client, error), list func(context.Context, *redis.Client) (T, error),
) (T, *redis.Client, nodeView, error) {
	for redirects := 0; ; redirects++ {
		out, err := list(ctx, node)
		var view nodeView
		if err == nil {
			view, err = served(ctx, node, slot)
		}
		if err == nil {
			return out, node, view, nil
		}
		if redirects >= cc.Options().MaxRedirects {
			var zero T
			return zero, nil, nodeView{}, err
		}
		next, ok := redirectList(ctx, cc, master, node, err)
		if !ok {
			var zero T
			return zero, nil, nodeView{}, err
		}
		node = next
	}
}

// redirectList returns the node to list again on after node failed the
// listing with err, and false when err is no redirection. The slot map
// is reloaded at once (nodeAt; ReloadState only schedules a reload):
//
//   - MOVED, or a node that names another (elsewhereError): the node
//     named, which a failover or the end of a reshard made the slot's
//     master, when the map knows it.
//   - ASK: the slot is migrating and a key has left node. The listing
//     goes to the slot's master again, after a pause that lets the
//     migration end.
//   - otherwise (READONLY, or a node the map does not know): the slot's
//     master in the reloaded map, once it names another node than node;
//     the map is reloaded again, for a while, until it does.
func redirectList(ctx context.Context, cc *redis.ClusterClient, master func(context.Context) (*redis.Client, error), node *redis.Client, err error) (*redis.Client, bool) {
	to, moved := redis.IsMovedError(err)
	var elsewhere *elsewhereError
	if errors.As(err, &elsewhere) {
		to = elsewhere.to
	}
	if to != "" {
		if target, lookErr := nodeAt(ctx, cc, to); lookErr == nil && target != nil {
			return target, true
		}
	}
	_, ask := redis.IsAskError(err)
	if !ask && !moved && elsewhere == nil && !redis.IsReadOnlyError(err) {
		return nil, false
	}
	stale := hostPort(node.Options().Addr)
	for deadline := time.Now().Add(redirectWait); ; {
		if cc.ForEachShard(ctx, func(context.Context, *redis.Client) error { return nil }) != nil {
			return nil, false // ForEachShard reloads the map first
		}
		next, lookErr := master(ctx)
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

// onMasters runs list on every master of cc's slot map (ForEachMaster,
// which reloads the map first) by onMaster's rule, and returns the
// listings once the slots their nodes serve cover the cluster's, each slot
// once, and none of them is migrating: a master missing from a stale map
// (one that a reshard gave slots to), two nodes that both say they serve
// a slot, or a slot whose keys are partly on the node importing it (which
// the map does not name while it serves no slot) would make a listing
// that lacks keys, or holds some twice. Such a walk is made again, up to
// the client's MaxRedirects times, before it fails; two listings that
// redirection sent to the same node count once.
func onMasters[T any](ctx context.Context, cc *redis.ClusterClient, list func(context.Context, *redis.Client) ([]T, error)) ([]T, error) {
	for walks := 0; ; walks++ {
		var (
			mu        sync.Mutex
			byNode    = map[string][]T{}
			owners    [numSlots]int
			migrating error
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			same := func(context.Context) (*redis.Client, error) { return m, nil }
			out, node, view, err := onMaster(ctx, cc, m, -1, same, list)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if len(view.migrating) > 0 && migrating == nil {
				migrating = &migratingError{view.migrating[0]}
			}
			addr := hostPort(node.Options().Addr)
			if _, dup := byNode[addr]; dup {
				return nil
			}
			byNode[addr] = out
			for _, r := range view.slots {
				for i := max(r.first, 0); i <= min(r.last, numSlots-1); i++ {
					owners[i]++
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		err = migrating
		if err == nil {
			err = coverage(owners[:])
		}
		if err == nil {
			var all []T
			for _, out := range byNode {
				all = append(all, out...)
			}
			return all, nil
		}
		if walks >= cc.Options().MaxRedirects || !sleepCtx(ctx, redirectPause) {
			return nil, err
		}
	}
}

// coverage returns an error naming the first slots that owners, the
// number of listed masters serving each slot, does not hold once.
func coverage(owners []int) error {
	for i, n := range owners {
		if n == 1 {
			continue
		}
		j := i
		for j+1 < len(owners) && owners[j+1] == n {
			j++
		}
		return fmt.Errorf("slots %d-%d are served by %d of the masters listed, not 1: the listing would not be complete", i, j, n)
	}
	return nil
}
