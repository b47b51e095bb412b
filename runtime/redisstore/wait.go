package redisstore

import (
	"context"
	"errors"
	"fmt"
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
// rather than its digest.
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
	node, ok := s.client.(*redis.Client)
	if cc, isCluster := s.client.(*redis.ClusterClient); isCluster {
		var err error
		node, err = cc.MasterForKey(ctx, key)
		if err != nil {
			return errCmd(ctx, err)
		}
		ok = true
	}
	if !ok {
		return errCmd(ctx, fmt.Errorf("cannot wait for replicas through a %T", s.client))
	}
	var (
		cmd  *redis.Cmd
		acks *redis.Cmd
	)
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
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

func errCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
