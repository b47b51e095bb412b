package sqliteoutbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemgen/idemgen/templates"
)

// The outbox's table lives with the other tables' SQL in templates, the
// text that idemgen also writes as a migration file (docs/generator.md,
// "Migrations"): one source, so that a tool-applied schema and Migrate's
// never differ. The files are embedded; only an unknown dialect fails.
var upSQL, downSQL, schemaErr = templates.OutboxSchema("sqlite")

// Schema returns the migration that creates the outbox's table and the one
// that drops it, for a service that applies its migrations with a tool.
func Schema() (up, down string) { return upSQL, downSQL }

// Migrate creates the outbox's table in db, the database of the service's
// sqlitestore. It is idempotent.
func Migrate(ctx context.Context, db *sql.DB) error {
	if schemaErr != nil {
		return fmt.Errorf("sqliteoutbox: migrate: %w", schemaErr)
	}
	if _, err := db.ExecContext(ctx, upSQL); err != nil {
		return fmt.Errorf("sqliteoutbox: migrate: %w", err)
	}
	return nil
}
