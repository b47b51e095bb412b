// Package templates holds the text that idemgen renders into generated
// files. The SQL schema of each store dialect lives in sql/ as plain SQL, so
// that the file a migration tool applies is the file reviewed here.
package templates

import (
	"embed"
	"fmt"
)

//go:embed sql
var sqlFiles embed.FS

// Schema returns the up and down migrations that create and drop the tables,
// indexes and functions a store of dialect ("postgres" or "sqlite") needs.
func Schema(dialect string) (up, down string, err error) {
	switch dialect {
	case "postgres", "sqlite":
	default:
		return "", "", fmt.Errorf("templates: unknown SQL dialect %q (want postgres or sqlite)", dialect)
	}
	u, err := sqlFiles.ReadFile("sql/" + dialect + ".up.sql")
	if err != nil {
		return "", "", fmt.Errorf("templates: %s schema: %w", dialect, err)
	}
	d, err := sqlFiles.ReadFile("sql/" + dialect + ".down.sql")
	if err != nil {
		return "", "", fmt.Errorf("templates: %s schema: %w", dialect, err)
	}
	return string(u), string(d), nil
}
