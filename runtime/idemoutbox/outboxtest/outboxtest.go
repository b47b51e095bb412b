// Package outboxtest is the suite every dialect of the transactional
// outbox (runtime/idemoutbox) passes, for the author of a dialect: Run
// drives an engine, a handler that stages effects and runners in one
// process; RunKills starts real child processes and kills them with
// SIGKILL at each point of an effect's life, with Child as the child's
// half.
package outboxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemoutbox"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/storetest/enginetest"
)

// Outbox is a dialect's outbox: the runner's Store, and Stage.
type Outbox interface {
	idemoutbox.Store
	Stage(ctx context.Context, name string, payload []byte) error
}

// Instance is one fresh database with a store and an outbox on it.
type Instance struct {
	Store  idemstore.Store
	Outbox Outbox
	// Write makes one business write recording marker in the
	// transaction of the request of ctx.
	Write func(ctx context.Context, marker string) error
	// Count reports the committed business writes recording marker.
	Count func(ctx context.Context, marker string) (int, error)
	// Block takes, outside the outbox, what the record of a delivery
	// has to wait for (SQLite's write lock, in a request's transaction;
	// on PostgreSQL the outbox's rows) and holds it until release.
	Block func(ctx context.Context) (release func(), err error)
}

// Target opens instances of a dialect.
type Target struct {
	// NewDB creates an empty database with the schema applied, dropped
	// when the test ends, and returns its name for Open and the child
	// processes.
	NewDB func(t *testing.T) string
	// Open opens an instance on db whose outbox refuses payloads over
	// maxPayload bytes; it is closed when the test ends.
	Open func(t *testing.T, db string, maxPayload int) Instance
	// Migrate applies the outbox's migration to db: the up migration,
	// or the down one, which drops the table, when up is false.
	Migrate func(t *testing.T, db string, up bool)
	// HelperEnv names the environment variable in which RunKills hands
	// a child process its database: the test binary, run again with its
	// TestHelperProcess alone, which calls Child.
	HelperEnv string
}

// open opens an instance on a new database.
func (tg Target) open(t *testing.T) Instance {
	return tg.Open(t, tg.NewDB(t), maxPayload)
}

// maxPayload is the payload limit of the suite's outboxes.
const maxPayload = 1 << 10

// The paths of the suite's operations.
const (
	txPath    = "/orders"
	loosePath = "/loose-orders"
)

// policies are a transactional operation and one that is not.
func policies(lease time.Duration) []idem.Policy {
	return []idem.Policy{
		enginetest.EnginePolicy("createOrder", txPath, lease, idemstore.Takeover, true),
		enginetest.EnginePolicy("createLooseOrder", loosePath, lease, idemstore.Takeover, false),
	}
}

// body is every request's body.
const body = `{"item":"book"}`

// The down migration drops the table, after which the outbox says it has
// none (idemoutbox.ErrNoOutbox); the up migration brings it back.
func noOutbox(t *testing.T, tg Target) {
	ctx, db := context.Background(), tg.NewDB(t)
	o := tg.Open(t, db, maxPayload).Outbox
	tg.Migrate(t, db, false)
	if _, err := o.List(ctx, idemoutbox.Query{}); !errors.Is(err, idemoutbox.ErrNoOutbox) {
		t.Errorf("List without the table = %v, want ErrNoOutbox", err)
	}
	if err := o.Redrive(ctx, 1); !errors.Is(err, idemoutbox.ErrNoOutbox) {
		t.Errorf("Redrive without the table = %v, want ErrNoOutbox", err)
	}
	tg.Migrate(t, db, true)
	if ms, err := o.List(ctx, idemoutbox.Query{}); err != nil || len(ms) != 0 {
		t.Errorf("List after the up migration = %v, %v", ms, err)
	}
}
