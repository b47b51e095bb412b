// Package migrations holds the idempotency tables' migrations that idemgen
// generated, one directory per dialect, for the service to apply at start
// after the business tables: the key table's (000001), the recovery
// points' (000002), the outbox's (000003) and, on PostgreSQL, the key
// table's functions that read the table itself only (000004).
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed postgres sqlite
var files embed.FS

// FS returns the migrations: postgres/*.sql and sqlite/*.sql.
func FS() fs.FS { return files }
