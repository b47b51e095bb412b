package pgoutbox

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/sqlqualified"
)

// Every statement the outbox sends calls pg_catalog's functions and
// operators by name: a runner's, an operator's or a sweep's runs outside
// every check of a handler's transaction, on a session whose search_path
// may find a function or an operator of the handler's making that fits
// the arguments better, or one of pg_catalog's argument types in a
// schema the search_path names before pg_catalog (docs/semantics.md
// §7.2).
func TestStatementsNamePgCatalog(t *testing.T) {
	for name, sql := range map[string]string{
		"tableSchema": tableSchemaSQL, "claim": claimSQL, "delivered": deliveredSQL,
		"failed": failedSQL, "release": releaseSQL, "prune": pruneSQL, "backlog": backlogSQL,
		"redrive": redriveSQL, "list": listSQL, "migrateLock": migrateLockSQL,
	} {
		if found := append(sqlqualified.Unqualified(sql), sqlqualified.Operators(sql)...); len(found) > 0 {
			t.Errorf("%s finds %q by the search_path; name pg_catalog's", name, found)
		}
	}
}
