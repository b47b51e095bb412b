// Package templates holds the text that idemgen renders into generated
// files. The SQL schema of each store dialect lives in sql/ as plain SQL, so
// that the file a migration tool applies is the file reviewed here.
package templates

import "embed"

//go:embed sql
var sqlFiles embed.FS

// Schema returns the up and down migrations that create and drop the tables,
// indexes and functions a store of dialect ("postgres" or "sqlite") needs.
func Schema(dialect string) (up, down string, err error) {
	return schemaFiles(dialect, "")
}
