package templates

import "fmt"

// PhaseSchema returns the up and down migrations of the table that keeps
// recovery points (docs/semantics.md §8.2) for a store of dialect
// ("postgres" or "sqlite"). It is a migration of its own, applied after
// Schema's: the key table's released migration never changes.
func PhaseSchema(dialect string) (up, down string, err error) {
	return schemaFiles(dialect, ".phases")
}

// schemaFiles reads the up and down scripts sql/<dialect><part>.up.sql
// and .down.sql.
func schemaFiles(dialect, part string) (up, down string, err error) {
	switch dialect {
	case "postgres", "sqlite":
	default:
		return "", "", fmt.Errorf("templates: unknown SQL dialect %q (want postgres or sqlite)", dialect)
	}
	u, err := sqlFiles.ReadFile("sql/" + dialect + part + ".up.sql")
	if err != nil {
		return "", "", fmt.Errorf("templates: %s schema: %w", dialect, err)
	}
	d, err := sqlFiles.ReadFile("sql/" + dialect + part + ".down.sql")
	if err != nil {
		return "", "", fmt.Errorf("templates: %s schema: %w", dialect, err)
	}
	return string(u), string(d), nil
}
