package templates

import "fmt"

// KeysOnlySchema returns the up and down migrations that replace the key
// table's functions with ones that read and write idempotency_keys itself
// only, never an inheritance child of it (docs/semantics.md §7.2). It is
// a migration of its own, applied after OutboxSchema's: the key table's
// released migration never changes. It is PostgreSQL's alone (dialect
// "postgres"): SQLite's tables have no children.
func KeysOnlySchema(dialect string) (up, down string, err error) {
	if dialect != "postgres" {
		return "", "", fmt.Errorf("templates: the keys-only functions are PostgreSQL's, not %q's", dialect)
	}
	return schemaFiles(dialect, ".only")
}
