package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated reports a write that fewer replicas acknowledged than
// WithReplicaAck asks for, within its timeout. The primary has the write, but a
// failover could lose it, so the store fails closed: the claim is given
// back and the engine answers 503 without running the handler.
var ErrNotReplicated = errors.New("redisstore: too few replicas acknowledged the write")

// waitFor is the WithReplicaAck setting.
type waitFor struct {
	replicas int
	timeout  time.Duration
}

// WithReplicaAck makes every write wait, before it counts as done, until
// replicas replicas have acknowledged it or timeout has passed (Redis's
// WAIT). A write that fewer replicas acknowledged fails with
// ErrNotReplicated. It narrows, and does not close, the window in which a
// failover loses an acknowledged claim; each write then costs a replication
// round trip more, and while replicas lag or are gone every claim fails
// (503). A single node without replicas fails every write with replicas
// above 0. timeout must be positive: WAIT with 0 waits forever.
//
// The script and WAIT must travel on one connection, so with WithReplicaAck the
// client must be a *redis.Client (single node or Sentinel failover) or a
// *redis.ClusterClient; each write then sends the script's source (EVAL)
// rather than its digest. On a cluster the store follows the MOVED and ASK
// redirections of a reshard or a failover itself, as the ClusterClient
// does for its own commands, up to its MaxRedirects times per write.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(s *Store) { s.wait = &waitFor{replicas: replicas, timeout: timeout} }
}

func (w *waitFor) check(client redis.UniversalClient) error {
	if w.replicas < 0 || w.timeout <= 0 {
		return fmt.Errorf("redisstore: WithReplicaAck(%d, %v): want replicas >= 0 and a positive timeout", w.replicas, w.timeout)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	default:
		return fmt.Errorf("redisstore: WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", client)
	}
}

// run runs script on key. With WithReplicaAck it sends WAIT behind the script on
// the same connection of the key's primary, in one round trip, and fails
// with ErrNotReplicated when too few replicas acknowledged.
func (s *Store) run(ctx context.Context, script *redis.Script, key string, args ...any) *redis.Cmd {
	if s.wait == nil {
		return script.Run(ctx, s.client, []string{key}, args...)
	}
	switch c := s.client.(type) {
	case *redis.Client:
		return s.evalWait(ctx, c, false, script, key, args)
	case *redis.ClusterClient:
		return s.runOnCluster(ctx, c, script, key, args)
	default:
		return errCmd(ctx, fmt.Errorf("cannot wait for replicas through a %T", s.client))
	}
}

// runOnCluster is run on a Redis Cluster. The script and WAIT go to the
// connection of one node, which does not follow the cluster's
// redirections as the ClusterClient does, so runOnCluster follows them
// itself, up to the client's MaxRedirects times:
//
//   - MOVED: the slot has another master (a reshard has ended, or a
//     replica has taken over). The slot map is reloaded, and the write
//     goes to the node the reply names.
//   - ASK: the slot is migrating and the key is already on the node the
//     reply names. ASKING, the script and WAIT go there in one pipeline
//     on one connection: ASKING holds for the next command only.
//   - a failed connection: the slot map is reloaded in the background (a
//     failover may replace the master). A connection that broke, or could
//     not be made, sends the write again to the key's master as the map
//     stands; a timeout does not.
//
// Resending is safe. Redis checks a command's slot before it runs it, so
// a node that answered MOVED or ASK ran nothing. A broken connection
// proves no such thing: the script may have run before it broke. But
// every script recognises its own earlier run and answers as that run
// did (scripts.go, Retries), the property go-redis relies on when it
// resends a command itself. ErrNotReplicated and every other answer of
// Redis are final.
func (s *Store) runOnCluster(ctx context.Context, cc *redis.ClusterClient, script *redis.Script, key string, args []any) *redis.Cmd {
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return errCmd(ctx, err)
	}
	asking := false
	for resends := 0; ; resends++ {
		cmd := s.evalWait(ctx, node, asking, script, key, args)
		err := cmd.Err()
		if err == nil || resends >= cc.Options().MaxRedirects {
			return cmd
		}
		movedTo, moved := redis.IsMovedError(err)
		askTo, ask := redis.IsAskError(err)
		switch {
		case moved || ask:
			// Reloaded at once, not in the background: a MOVED write
			// goes to the new master now, and so does the next write.
			addr := movedTo
			if ask {
				addr = askTo
			}
			target, lookErr := nodeAt(ctx, cc, addr)
			if lookErr != nil {
				return cmd
			}
			if target == nil && moved {
				// The map names the node by another address than the
				// reply (a host name, or an address go-redis rewrote).
				target, lookErr = cc.MasterForKey(ctx, key)
			}
			if target == nil || lookErr != nil {
				return cmd
			}
			node, asking = target, ask
		default:
			failed, resend := connFailure(ctx, err)
			if failed {
				cc.ReloadState(ctx)
			}
			if !resend {
				return cmd
			}
			if node, err = cc.MasterForKey(ctx, key); err != nil {
				return cmd
			}
			asking = false
		}
	}
}

// evalWait sends the script and WAIT to node in one round trip, behind
// ASKING when asking.
func (s *Store) evalWait(ctx context.Context, node *redis.Client, asking bool, script *redis.Script, key string, args []any) *redis.Cmd {
	var (
		cmd  *redis.Cmd
		acks *redis.Cmd
	)
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if asking {
			p.Do(ctx, "ASKING")
		}
		cmd = script.Eval(ctx, p, []string{key}, args...)
		acks = p.Do(ctx, "WAIT", s.wait.replicas, max(s.wait.timeout.Milliseconds(), 1))
		return nil
	})
	if cmd.Err() != nil {
		return cmd
	}
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	if n, err := acks.Int64(); err != nil {
		cmd.SetErr(fmt.Errorf("WAIT: %w", err))
	} else if n < int64(s.wait.replicas) {
		cmd.SetErr(fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, n, s.wait.replicas, s.wait.timeout))
	}
	return cmd
}

// nodeAt reloads cc's slot map and returns the client of the node at
// addr, or nil when the map knows no node there. ForEachShard reloads the
// map before it walks the nodes (ReloadState only schedules a reload), and
// walks replicas too, so a replica that has just taken over is found even
// if the map still calls it one.
func nodeAt(ctx context.Context, cc *redis.ClusterClient, addr string) (*redis.Client, error) {
	want := hostPort(addr)
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	err := cc.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		if hostPort(n.Options().Addr) == want {
			mu.Lock()
			found = n
			mu.Unlock()
		}
		return nil
	})
	return found, err
}

// hostPort puts addr in net.JoinHostPort's form, to compare: Redis names
// an IPv6 node in a redirection without brackets, and go-redis names a
// loopback node of a slot map that the ClusterSlots option answers with
// no host, so every loopback host is written "localhost".
func hostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		i := strings.LastIndexByte(addr, ':')
		if i < 0 {
			return addr
		}
		host, port = addr[:i], addr[i+1:]
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsLoopback() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// connFailure reports whether err is a failure of the connection rather
// than an answer of Redis or the end of ctx, and whether the write is to
// be sent again: not after a timeout, where the script may still be
// running and the caller has waited its share already.
func connFailure(ctx context.Context, err error) (failed, resend bool) {
	var reply redis.Error
	var netErr net.Error
	switch {
	case ctx.Err() != nil, errors.Is(err, redis.ErrClosed), errors.As(err, &reply):
		return false, false
	case errors.As(err, &netErr):
		return true, !netErr.Timeout()
	default:
		broken := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		return broken, broken
	}
}

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
