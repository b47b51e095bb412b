package pgstore

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/internal/sqlqualified"
)

// searchPathNames returns what sql finds by the search_path: the
// functions it calls by a name other than pg_catalog's, but the store's
// own (storeFunctionsSQL), whose names the end of a handler's
// transaction refuses in every schema, and those among also; and its
// operators, casts and catalog relations not named by pg_catalog
// (sqlqualified.Operators).
func searchPathNames(sql string, also ...string) []string {
	return append(sqlqualified.Unqualified(sql, append(storeFunctionNames(), also...)...), sqlqualified.Operators(sql)...)
}

// clockByPath are the statements that read the time by the unqualified
// clock_timestamp(), as the store's functions' bodies do: the claim and
// what it decides on (the peek, settle, the phases), and the writes of a
// claim's holder that set a lease or an expiry. None of them runs on a
// handler's session while its settings stand (the completion in its
// transaction, and everything after its COMMIT until the reset, name
// pg_catalog's): only a search_path the deployment gives the store's
// sessions can name a schema before pg_catalog there, as the tests do
// to set the store's clock (openOnClock), and pg_catalog's function,
// which takes no argument, is an exact match that no other can fit
// better.
var clockByPath = map[string]bool{
	"claimSQL": true, "peekSQL": true, "completeSQL": true, "abandonTakeoverSQL": true, "failClosedTxSQL": true,
	"settleSQL": true, "recordPhaseSQL": true, "loadPhaseSQL": true, "listPhasesSQL": true,
}

// Every statement pgstore sends names pg_catalog's functions, operators,
// types and relations by pg_catalog (docs/semantics.md §7.2): the claim,
// the completion, the release, the abandons, the peek, settle, the
// session's resets and checks, the phases, StageEffect, the statements
// that begin and end a handler's transaction, and those of an operator,
// the sweeper and the guard. A search_path that names pg_catalog after a
// schema the handler's role may create in (SET LOCAL search_path = s,
// pg_catalog, or the deployment's) would otherwise have a function or an
// operator of the handler's, with pg_catalog's argument types, chosen in
// place of pg_catalog's; and one that fits the arguments better is
// chosen wherever it stands on the path. statementTexts lists every
// text (TestStatementTextsListed), so a new statement is checked too;
// stageSQL's raw template, whose %s is the table, is checked as it is
// sent. The one name left to the search_path is the clock's in
// clockByPath.
func TestEveryStatementNamesPgCatalog(t *testing.T) {
	texts := statementTexts()
	for _, q := range []idemadmin.Query{{}, {States: []idemstore.State{idemstore.StateCompleted}, Tenant: "t", Operation: "o",
		OlderThan: time.Second, ExpiringWithin: time.Second, Limit: 1, IncludeExpired: true}} {
		scan, _ := scanSQL(q)
		texts["scanSQL"] = append(texts["scanSQL"], scan)
	}
	names := make([]string, 0, len(texts))
	for name := range texts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, sql := range texts[name] {
			if strings.Contains(sql, "%s") {
				continue
			}
			var also []string
			if clockByPath[name] {
				also = []string{"clock_timestamp"}
			}
			if found := searchPathNames(sql, also...); len(found) > 0 {
				t.Errorf("%s finds %q by the search_path; name pg_catalog's", name, found)
			}
		}
	}
}

// The check above fails a statement that calls or compares by the
// search_path: each of these is one of pgstore's statements with one
// name taken back to the form it had before it was qualified.
func TestEveryStatementNamesPgCatalogFindsAnUnqualifiedOne(t *testing.T) {
	texts := statementTexts()
	for _, c := range []struct{ name, qualified, bare string }{
		{"claimSQL", "OPERATOR(pg_catalog.=)", "="},
		{"claimSQL", "OPERATOR(pg_catalog.<>)", "<>"},
		{"markCommittedSQL", "OPERATOR(pg_catalog.=)", "="},
		{"txTimeoutsSQL", "pg_catalog.set_config", "set_config"},
		{"failClosedTxSQL", "OPERATOR(pg_catalog.*)", "*"},
		{"settleSQL", "pg_catalog.pg_locks", "pg_locks"},
		{"settleSQL", "::pg_catalog.oid", "::oid"},
		{"completeTxSQL", "OPERATOR(pg_catalog.=)", "="},
		{"completeTxSQL", "pg_catalog.clock_timestamp()", "clock_timestamp()"},
		{"sessionCheckSQL", "OPERATOR(pg_catalog.<>)", "<>"},
	} {
		sql := texts[c.name][0]
		if !strings.Contains(sql, c.qualified) {
			t.Errorf("%s names no %s", c.name, c.qualified)
			continue
		}
		var also []string
		if clockByPath[c.name] {
			also = []string{"clock_timestamp"}
		}
		if found := searchPathNames(strings.Replace(sql, c.qualified, c.bare, 1), also...); len(found) != 1 {
			t.Errorf("%s with %s for %s: the check found %q, want the one", c.name, c.bare, c.qualified, found)
		}
	}
}
