package idemoutbox

import (
	"context"
	"errors"
	"time"
)

// State is where a staged effect stands.
type State string

// The states of a staged effect.
const (
	// StatePending: not delivered yet; a runner delivers it when it is
	// due and no other runner holds its lease.
	StatePending State = "pending"
	// StateDelivered: the receiver accepted it.
	StateDelivered State = "delivered"
	// StateDead: every attempt failed; it waits for an operator, who may
	// re-drive it (Store.Redrive, `idemgen keys redrive`).
	StateDead State = "dead"
)

// Message is one staged effect as the store keeps it.
type Message struct {
	ID int64
	// Tenant, Scope and Key name the request's key as it is stored
	// (idemstore.Identity), so that an operator finds a key's effects.
	Tenant, Scope, Key string
	// EffectKey is idem.EffectKey of the request and Name: the same on
	// every attempt, so a receiver that honours it acts once.
	EffectKey string
	Name      string
	Payload   []byte
	State     State
	// Attempts counts the deliveries begun, this one included when a
	// runner hands the message to its receiver.
	Attempts      int
	NextAttemptAt time.Time
	LeasedUntil   time.Time
	LastError     string
	CreatedAt     time.Time
	DeliveredAt   time.Time
}

// Query selects staged effects; zero fields select every one.
type Query struct {
	// ID selects one effect.
	ID     int64
	Tenant string
	// Key selects one key's effects, in Scope ('' for a tenant-wide
	// key); Scope alone selects nothing more.
	Scope, Key string
	States     []State
	// Limit bounds the number returned, oldest first; 0 means no bound.
	Limit int
}

// Store is what a dialect offers the runner and the operator. Times are
// the store's own: leases and backoff are measured by its clock.
type Store interface {
	// Claim leases up to limit due pending effects under token until
	// lease from now, counting an attempt on each, oldest due first.
	// Effects another runner holds under a running lease are passed over.
	Claim(ctx context.Context, limit int, lease time.Duration, token string) ([]Message, error)
	// Delivered records m's delivery and returns the time from its
	// staging to this record. It is recorded even when m's lease has
	// passed to another runner: the effect was delivered either way. An
	// error wrapping ErrGone when no effect has m.ID under m's identity
	// (its request's key and its effect key): an id given again to
	// another effect is not m's.
	Delivered(ctx context.Context, m Message) (time.Duration, error)
	// Failed records a failed attempt of m, still held under token: m is
	// due again after retryIn, or dead when dead is set. A claim that lost
	// its lease changes nothing, nor does one of an id given again to
	// another effect.
	Failed(ctx context.Context, m Message, token, reason string, retryIn time.Duration, dead bool) error
	// Release gives back m, held under token and never handed to its
	// receiver, uncounted and due at once.
	Release(ctx context.Context, m Message, token string) error
	// Prune deletes up to limit effects delivered at least age ago and
	// returns how many it deleted.
	Prune(ctx context.Context, age time.Duration, limit int) (int, error)
	// Backlog counts the effects not delivered.
	Backlog(ctx context.Context) (Backlog, error)
	// List returns the effects q selects, oldest first.
	List(ctx context.Context, q Query) ([]Message, error)
	// Redrive makes the dead effect id pending and due at once, with its
	// attempts counted from zero. ErrNotDead when it is not dead (or
	// absent), ErrStagedTwice when a pending effect has its effect key.
	Redrive(ctx context.Context, id int64) error
}

// Backlog is what the outbox has not delivered.
type Backlog struct {
	Pending, Dead int64
	// OldestPending is the age of the oldest pending effect, by the
	// store's clock; 0 when none is pending. It grows without bound when
	// no runner delivers: the signal a delivery lag of delivered effects
	// alone cannot give.
	OldestPending time.Duration
}

// ErrNotTransactional is wrapped by the error of staging outside the
// transaction of a request the engine protects with a key: a handler
// behind no engine, a keyless request, an operation that is not
// transactional or a store without transactions. Nothing would then tie
// the effect to the request's writes, so nothing is staged.
var ErrNotTransactional = errors.New("idemoutbox: effects are staged only in the transaction of a transactional request protected by a key")

// ErrTooLarge is wrapped by the error of staging a payload over the
// outbox's limit. Nothing is staged; the handler answers a problem.
var ErrTooLarge = errors.New("idemoutbox: the effect's payload is over the outbox's limit")

// ErrStagedTwice reports an effect staged twice under one name in one
// request (one effect key), or a dead effect re-driven while another
// effect with its key is pending. Nothing was staged.
var ErrStagedTwice = errors.New("idemoutbox: an effect with this effect key is already pending")

// ErrNoOutbox reports a database without the outbox's table: its
// migration (pgoutbox.Migrate, sqliteoutbox.Migrate) was never applied.
var ErrNoOutbox = errors.New("idemoutbox: the database has no outbox table")

// ErrGone reports a delivery recorded for an effect that is no longer in
// the outbox: deleted by an operator, or delivered and recorded by
// another runner and pruned since. Nothing is left to record.
var ErrGone = errors.New("idemoutbox: the effect is no longer in the outbox")

// ErrNotDead reports a re-drive of an effect that is not dead or absent.
var ErrNotDead = errors.New("idemoutbox: no dead effect with this id")
