package pgoutbox

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/internal/pgconnect"
	"github.com/idemgen/idemgen/templates"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The outbox's table lives with the other tables' SQL in templates, the
// text that idemgen also writes as a migration file (docs/generator.md,
// "Migrations"): one source, so that a tool-applied schema and Migrate's
// never differ. The files are embedded; only an unknown dialect fails.
var upSQL, downSQL, schemaErr = templates.OutboxSchema("postgres")

// Schema returns the migration that creates the outbox's table and the one
// that drops it, for a service that applies its migrations with a tool.
func Schema() (up, down string) { return upSQL, downSQL }

// migrateLockSQL serializes concurrent Migrate calls: CREATE ... IF NOT
// EXISTS is not safe against itself without it. The number is arbitrary
// and fixed.
const migrateLockSQL = `SELECT pg_catalog.pg_advisory_xact_lock(7236194020345570124)`

// Migrate creates the outbox's table in the first schema of the pool's
// search_path, the one pgstore.Migrate creates the key table in, in one
// transaction, with the search_path narrowed to that schema for the
// transaction, so that pg_catalog's types and functions come first. It is safe to run on every start and from several
// processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if schemaErr != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", schemaErr)
	}
	// Without arguments pgx sends the text as one simple-protocol query,
	// so the whole script runs at once, the lock held until its COMMIT.
	if _, err := pool.Exec(ctx, "BEGIN;\n"+pgconnect.PinSearchPathSQL+";\n"+migrateLockSQL+";\n"+upSQL+"\nCOMMIT;"); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	return nil
}
