package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemstore"
)

// Target describes a store under test to every suite: the conformance
// suites here (Run, RunTx), the model checker (package model), the
// engine's scenarios (package enginetest) and the operator's suite
// (idemadmin/admintest). A store's tests build one Target and hand it to
// each suite; a suite uses the parts it needs and fails at once, naming
// the part, when one is missing.
type Target struct {
	// Open returns a new, empty store for one subtest and registers its
	// cleanup with t.Cleanup. With clock nil the store keeps its own clock
	// (the conformance suites measure leases in real time). With a clock,
	// the store measures leases and expiry by it: through a clock option
	// (memstore.WithClock(clock.Now)) or, for a database's clock, by
	// keeping it in step through Instance.SetClock.
	Open func(t *testing.T, clock *Clock) Instance
	// TxClaims says how the store's transactional claim lives, for the
	// model checker; zero for a store that is no idemstore.Transactor.
	TxClaims TxClaims
	// SkipLeaseFence, when not empty, skips the subtest of RunTx in which
	// a handler outlives its lease and another request takes its key
	// over; it says why the store cannot let that happen.
	SkipLeaseFence string
	// Session lists state a handler can leave on its database session
	// (temporary tables, settings, prepared statements, attached
	// databases) that no later request may see (RunTx).
	Session []SessionState
}

// Instance is one store that Target.Open opened, with the means to make
// and observe what a handler does in its database.
type Instance struct {
	// Store is the store. RunTx and the engine's transactional scenarios
	// need an idemstore.Transactor, the operator's suite an idemadmin.Store.
	Store idemstore.Store
	// Write performs one business write recording marker, inside tx, the
	// value that the store's Tx.Driver returned.
	Write func(ctx context.Context, tx any, marker string) error
	// Count reports how many committed business writes record marker.
	Count func(ctx context.Context, marker string) (int, error)
	// Exec runs one raw SQL statement through tx, the value that the
	// store's Tx.Driver returned, as a handler could.
	Exec func(ctx context.Context, tx any, sql string) error
	// SetClock, for a store opened on a clock it cannot read from Go (a
	// database's), makes the store's clock read now from this call on.
	SetClock func(ctx context.Context, now time.Time) error
	// Crash ends tx the way the death of its process would: the
	// transaction is rolled back without Commit or Rollback, and the
	// connection is gone. It returns when the database has seen it.
	Crash func(ctx context.Context, tx idemstore.Tx) error
	// PhaseTTL, for a store whose recovery points expire by a clock the
	// test cannot set (Redis's own), reports the time phase name of id
	// has left, so that the phase suite can check a long ttl without
	// waiting it out.
	PhaseTTL func(ctx context.Context, id idemstore.Identity, name string) (time.Duration, error)
	// Dump returns every byte the store keeps (a table's rows, Redis's
	// keys and values), for the check that secrets stay out of it.
	Dump func(t *testing.T) []byte
}

// TxClaims says how a store's transactional claim lives; see the model
// checker's package documentation.
type TxClaims int

const (
	// TxClaimCommitted is a claim committed before the handler's
	// transaction begins: visible to others, left in flight by a crash.
	TxClaimCommitted TxClaims = iota + 1
	// TxClaimInTx is a claim written inside the handler's transaction:
	// invisible to others until Commit, undone by a crash or Release.
	TxClaimInTx
)

// OpenTx opens an Instance of target whose store is an idemstore.Transactor
// with Write and Count, or fails the test saying what is missing.
func OpenTx(t *testing.T, target Target) (Instance, idemstore.Transactor) {
	t.Helper()
	in := target.Open(t, nil)
	tr, ok := in.Store.(idemstore.Transactor)
	if !ok || in.Write == nil || in.Count == nil {
		t.Fatalf("storetest: the transactional suites need a Store that is an idemstore.Transactor (%T), a Write and a Count", in.Store)
	}
	return in, tr
}

// Clock is a clock that moves only when told to, for stores and engines
// under test. Its zero value reads the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the time last set.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set makes the clock read now.
func (c *Clock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
