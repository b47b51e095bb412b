package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/internal/pgconnect"
	"github.com/idemgen/idemgen/templates"
)

// Migrate creates the tables, indexes and functions pgstore needs (the
// key table's and the phases', templates.PhaseSchema, with the key
// table's functions as templates.KeysOnlySchema replaces them) in the
// first schema of the pool's search_path, in one transaction, with the
// search_path narrowed to that schema for the transaction, so that
// pg_catalog's types and functions come first. It is safe to run
// on every start and from several processes at once. Applications that
// manage migrations with a tool apply the files idemgen generates instead.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	up, _, err := templates.Schema("postgres")
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	phases, _, err := templates.PhaseSchema("postgres")
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	only, _, err := templates.KeysOnlySchema("postgres")
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer conn.Release()
	// Without arguments pgx sends the text as one simple-protocol query, so
	// the whole file runs as one script; BEGIN/COMMIT around it make the
	// advisory lock last until the schema is complete.
	// pgconnect.PinSearchPathSQL makes the script's names the built-in
	// ones whatever the pool's search_path puts before pg_catalog.
	script := "BEGIN;\n" + pgconnect.PinSearchPathSQL + ";\n" + migrateLockSQL + ";\n" + up + "\n" + phases + "\n" + only + "\nCOMMIT;"
	if _, err := conn.Exec(ctx, script); err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), rollbackSQL)
		}
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return nil
}
