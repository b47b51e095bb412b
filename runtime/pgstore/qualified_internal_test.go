package pgstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/sqlqualified"
)

// The statements that run outside the checked end of a handler's
// transaction (an operator's, the sweeper's, the guard's) call
// pg_catalog's functions by name, and the store's own only by the names
// that the end refuses in every schema (storeFunctionsSQL): a function
// of a handler's making that fits the arguments better is never chosen
// there (docs/semantics.md §7.2).
func TestStatementsOutsideTheEndNamePgCatalog(t *testing.T) {
	scan, _ := scanSQL(idemadmin.Query{States: []idemstore.State{idemstore.StateCompleted}, Tenant: "t", Operation: "o",
		OlderThan: time.Second, ExpiringWithin: time.Second, Limit: 1})
	own := strings.Split(strings.Trim(strings.TrimSuffix(storeFunctionsSQL, "::pg_catalog.name[]"), "'{}"), ",")
	for name, sql := range map[string]string{
		"scan": scan, "get": getSQL, "resolve": resolveSQL, "forget": forgetSQL, "stats": statsSQL,
		"sweep": sweepSQL, "sweepPhases": sweepPhasesSQL, "guard": guardSQL, "guardSession": guardSessionSQL,
		"stage": fmt.Sprintf(stageSQL, `"s"."idempotency_outbox"`),
	} {
		if found := sqlqualified.Unqualified(sql, own...); len(found) > 0 {
			t.Errorf("%s calls %q by a name the search_path resolves; name pg_catalog's", name, found)
		}
	}
}
