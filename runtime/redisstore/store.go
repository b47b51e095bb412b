// Package redisstore keeps idempotency keys in Redis or Redis Cluster
// through go-redis.
//
// Each key is one Redis hash, changed only by Lua scripts (scripts.go), so
// a claim, a completion, a release and an abandonment are each atomic and
// cost one round trip. Leases and expiry are measured by Redis's own clock,
// and each record carries its own PEXPIREAT: Redis deletes a key when its
// TTL ends, so the store needs no sweeper and does not implement
// idemstore.Sweeper.
//
// A record lives in one key, whose name puts a hash of the identity between
// braces, so the same code works against a single node, a Sentinel-managed
// primary and a Redis Cluster (any redis.UniversalClient).
//
// Redis has no transactions that a handler's database writes could join,
// so the store is no idemstore.Transactor: idem.New refuses a transactional
// policy on it. Keep transactional operations on a SQL store.
//
// What Redis promises, and what it does not (asynchronous replication, a
// lost claim after a failover, appendfsync and WAIT), is in the project's
// runtime documentation; read it before trusting payments to this store.
package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/headerwire"
)

// DefaultPrefix starts the name of every key the store writes, unless
// WithPrefix sets another.
const DefaultPrefix = "idem:"

// Store is an idempotency store in Redis. It implements idemstore.Store and is
// safe for concurrent use by many goroutines and many processes.
type Store struct {
	client redis.UniversalClient
	prefix string
	// now is the test clock; nil means Redis's own clock.
	now func() time.Time
	// wait, when set, makes every write wait for replicas (WithReplicaAck).
	wait *waitFor
}

var _ idemstore.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key name, so that several
// applications, or several tests, can share one Redis without meeting each
// other's keys. It must not contain '{' or '}', which would change the hash
// slot a record lands in.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// WithClock makes the store measure leases and expiry by now instead of
// Redis's clock. It exists for tests that move time without sleeping, and
// every process that shares the keys must use the same clock. Redis's own
// deadline would mean nothing on another clock, so the store sets none:
// records count as absent once expired, but stay in Redis until the test
// deletes them.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns a store that keeps its keys through client: a *redis.Client,
// a failover client or a *redis.ClusterClient.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q contains a brace, which would move records across hash slots", s.prefix)
	}
	if s.wait != nil {
		if err := s.wait.check(client); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Key returns the name of the Redis key that holds id's record: the prefix
// and, between braces, the hex SHA-256 of the identity. Redis Cluster hashes
// only what is between the braces, so every key of one record stays in one
// slot whatever the tenant or the client's key contains (a key with braces
// in it would break a tag made from the raw key). Operators use it to find
// or delete a record, for example to resolve an indeterminate key.
func (s *Store) Key(id idemstore.Identity) string {
	// Lengths first, so that no two identities encode alike whatever their
	// parts contain.
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(id.Tenant)+len(id.Scope)+len(id.Key))
	for _, part := range []string{id.Tenant, id.Scope, id.Key} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	sum := sha256.Sum256(b)
	return s.prefix + "{" + hex.EncodeToString(sum[:]) + "}"
}

// clockArg is the scripts' ARGV[1]: "" for Redis's clock, or the test
// clock in microseconds since the Unix epoch.
func (s *Store) clockArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

// Claim atomically claims c.Identity in one round trip.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.Result, error) {
	if err := c.Check(); err != nil {
		return idemstore.Result{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	key := s.Key(c.Identity)
	cmd := s.run(ctx, claimScript, key,
		s.clockArg(), c.Operation, c.Fingerprint, c.Token,
		c.Lease.Microseconds(), c.TTL.Microseconds(), string(c.OnLeaseExpiry),
		c.Tenant, c.Scope, c.Key)
	v, err := cmd.Slice()
	if errors.Is(err, ErrNotReplicated) {
		// The primary holds the claim, but a failover could forget it.
		// Give a won claim back, so that the client's retry can run
		// rather than meet it in flight until its lease ends; the engine
		// answers 503 and runs nothing.
		if won, _ := cmd.Val().([]any); len(won) > 0 && (won[0] == "won" || won[0] == "took_over") {
			_ = releaseScript.Run(ctx, s.client, []string{key}, s.clockArg(), c.Token, nonce(), strayWindow.Microseconds()).Err()
		}
	}
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	res, err := readClaim(v)
	if err != nil {
		return idemstore.Result{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	return res, nil
}

// Complete stores resp for the claim held with token, or returns
// idemstore.ErrFenced. Header values and the body are stored byte for byte.
func (s *Store) Complete(ctx context.Context, id idemstore.Identity, token string, resp idemstore.Response) error {
	body, omitted := resp.Body, "0"
	if resp.Omitted {
		// An omitted body is never replayed, so none is kept.
		body, omitted = nil, "1"
	}
	return s.fenced(ctx, "complete", completeScript, id, token,
		resp.Status, headerwire.Encode(resp.Header), body, omitted)
}

// Release frees the claim held with token, or returns idemstore.ErrFenced. The
// key keeps a small tombstone until the record's expiry, which every claim
// treats as absent except a late copy of the released claim itself: Redis
// may run a resent claim after the release that followed it, and that
// claim must not hold the key again for a holder that is gone.
func (s *Store) Release(ctx context.Context, id idemstore.Identity, token string) error {
	return s.fenced(ctx, "release", releaseScript, id, token, strayWindow.Microseconds())
}

// strayWindow is how long a release that found no record keeps its
// token's tombstone: far longer than a command can linger in a broken
// connection before Redis runs it (TCP gives up on a dead peer within
// about a quarter of an hour only at the kernel's longest defaults, and
// go-redis's own timeouts are seconds). It costs one small hash per
// release of a claim that failed on its way.
const strayWindow = 20 * time.Minute

// Abandon applies mode to the claim held with token at once, or returns
// idemstore.ErrFenced.
func (s *Store) Abandon(ctx context.Context, id idemstore.Identity, token string, mode idemstore.LeaseExpiry) error {
	if mode != idemstore.Takeover && mode != idemstore.FailClosed {
		return fmt.Errorf("redisstore: abandon: unknown lease-expiry mode %q", mode)
	}
	return s.fenced(ctx, "abandon", abandonScript, id, token, string(mode))
}

// fenced runs one of the scripts that only the holder of token may run;
// they answer 1 when they changed the record and 0 when token does not
// hold it. Each call carries a nonce of its own, by which a script sent
// again after a lost reply recognises its own earlier effect.
func (s *Store) fenced(ctx context.Context, what string, script *redis.Script, id idemstore.Identity, token string, args ...any) error {
	argv := append([]any{s.clockArg(), token, nonce()}, args...)
	n, err := s.run(ctx, script, s.Key(id), argv...).Int()
	if err != nil {
		return fmt.Errorf("redisstore: %s: %w", what, err)
	}
	if n == 0 {
		return idemstore.ErrFenced
	}
	return nil
}

func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return string(b[:])
}
