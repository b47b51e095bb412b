package pgoutbox

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/sqlqualified"
)

// Every statement the outbox sends calls pg_catalog's functions by
// name: a runner's, an operator's or a sweep's runs outside every check
// of a handler's transaction, on a session whose search_path may find a
// function of the handler's making that fits the arguments better
// (docs/semantics.md §7.2).
func TestStatementsNamePgCatalog(t *testing.T) {
	for name, sql := range map[string]string{
		"tableSchema": tableSchemaSQL, "claim": claimSQL, "delivered": deliveredSQL,
		"failed": failedSQL, "release": releaseSQL, "prune": pruneSQL, "backlog": backlogSQL,
		"redrive": redriveSQL, "list": listSQL, "migrateLock": migrateLockSQL,
	} {
		if found := sqlqualified.Unqualified(sql); len(found) > 0 {
			t.Errorf("%s calls %q by a name the search_path resolves; name pg_catalog's", name, found)
		}
	}
}
