package sqliteoutbox

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
)

var (
	//go:embed up.sql
	upSQL string
	//go:embed down.sql
	downSQL string
)

// Schema returns the migration that creates the outbox's table and the one
// that drops it, for a service that applies its migrations with a tool.
func Schema() (up, down string) { return upSQL, downSQL }

// Migrate creates the outbox's table in db, the database of the service's
// sqlitestore. It is idempotent.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, upSQL); err != nil {
		return fmt.Errorf("sqliteoutbox: migrate: %w", err)
	}
	return nil
}
