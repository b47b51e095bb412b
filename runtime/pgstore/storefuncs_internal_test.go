package pgstore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/internal/sqlqualified"
)

// The functions sameTxCheckSQL watches for a handler's replacement, or
// its own of the same name in any schema, are the functions the
// migrations create: a function a later migration adds is watched too,
// or this fails.
func TestWatchedFunctionsAreTheMigrations(t *testing.T) {
	created := migrationsCreate(t, `(?i)CREATE (?:OR REPLACE )?FUNCTION (\w+)`)
	watched := map[string]bool{}
	for _, name := range namesOf(t, storeFunctionsSQL) {
		watched[name] = true
		if !created[name] {
			t.Errorf("sameTxCheckSQL watches %s, which no migration creates", name)
		}
	}
	for name := range created {
		if !watched[name] {
			t.Errorf("the migrations create %s, which sameTxCheckSQL does not watch", name)
		}
	}
}

// The tables whose names, triggers, rules, policies and writes
// sameTxCheckSQL watches (watchedSQL) are the tables the migrations
// create: a table a later migration adds is watched too, or this fails.
func TestWatchedTablesAreTheMigrations(t *testing.T) {
	created := migrationsCreate(t, `(?i)CREATE TABLE (?:IF NOT EXISTS )?(\w+)`)
	watched := map[string]bool{}
	for _, m := range regexp.MustCompile(`to_regclass\('(\w+)'\)`).FindAllStringSubmatch(watchedSQL, -1) {
		watched[m[1]] = true
		if !created[m[1]] {
			t.Errorf("watchedSQL watches %s, which no migration creates", m[1])
		}
	}
	for name := range created {
		if !watched[name] {
			t.Errorf("the migrations create %s, which watchedSQL does not watch", name)
		}
	}
	named := map[string]bool{}
	for _, name := range namesOf(t, storeTablesSQL) {
		named[name] = true
	}
	for name := range watched {
		if !named[name] {
			t.Errorf("watchedSQL watches %s, which storeTablesSQL does not name", name)
		}
	}
	for name := range named {
		if !watched[name] {
			t.Errorf("storeTablesSQL names %s, which watchedSQL does not watch", name)
		}
	}
}

// namesOf returns the names of a name[] literal.
func namesOf(t *testing.T, literal string) []string {
	t.Helper()
	list := regexp.MustCompile(`^'\{([a-z_,]+)\}'::pg_catalog\.name\[\]$`).FindStringSubmatch(literal)
	if list == nil {
		t.Fatalf("%s is not a list of names", literal)
	}
	return strings.Split(list[1], ",")
}

// migrationsCreate returns the names, in lower case, that the first group
// of pattern matches in the PostgreSQL migrations.
func migrationsCreate(t *testing.T, pattern string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../templates/sql/postgres*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations found: %v", err)
	}
	re := regexp.MustCompile(pattern)
	created := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			created[strings.ToLower(m[1])] = true
		}
	}
	return created
}

// The names of pg_catalog's functions and types that sameTxCheckSQL
// refuses a handler's transaction to make in any schema
// (searchPathFunctionsSQL, searchPathTypesSQL) are those that the
// store's functions' bodies and pgstore's statements find through the
// search_path, derived here from the migrations' text: a name that a
// body comes to call, declare or cast to unqualified fails this until
// it is refused too, and one refused that nothing uses any more fails it
// as well. pg_try_advisory_xact_lock_shared is the exception: the
// statements of a process of an earlier version name it uncast. Every
// operator is refused whatever its name, and a relation a body names is
// one of the store's tables, whose names are refused (storeTablesSQL).
func TestSearchPathNamesAreWatched(t *testing.T) {
	funcs, types, rels := map[string]bool{"pg_try_advisory_xact_lock_shared": true}, map[string]bool{}, map[string]bool{}
	for _, body := range migrationBodies(t) {
		bodyNames(body, funcs, types, rels)
	}
	for _, name := range migrationDDLTypes(t) {
		types[name] = true
	}
	for _, texts := range statementTexts() {
		for _, sql := range texts {
			if strings.Contains(sql, "%s") {
				continue // stageSQL's raw template; it is listed formatted too
			}
			for _, name := range sqlqualified.Unqualified(sql, storeFunctionNames()...) {
				funcs[strings.ToLower(name)] = true
			}
		}
	}
	tables := map[string]bool{}
	for _, name := range namesOf(t, storeTablesSQL) {
		tables[name] = true
	}
	for rel := range rels {
		if !tables[rel] {
			t.Errorf("a function's body names the relation %s by the search_path, which sameTxCheckSQL does not watch", rel)
		}
	}
	for _, l := range []struct {
		name, literal string
		found         map[string]bool
	}{{"searchPathFunctionsSQL", searchPathFunctionsSQL, funcs}, {"searchPathTypesSQL", searchPathTypesSQL, types}} {
		watched := map[string]bool{}
		for _, name := range namesOf(t, l.literal) {
			watched[name] = true
			if !l.found[name] {
				t.Errorf("%s names %s, which no function's body nor statement finds by the search_path", l.name, name)
			}
		}
		for name := range l.found {
			if !watched[name] {
				t.Errorf("a function's body or a statement finds %s by the search_path, which %s does not name", name, l.name)
			}
		}
	}
}

// The derivation above finds a function, a declared type, a cast and a
// %ROWTYPE that a body names unqualified.
func TestBodyNamesFindsUnqualifiedNames(t *testing.T) {
	funcs, types, rels := map[string]bool{}, map[string]bool{}, map[string]bool{}
	bodyNames(`
DECLARE
    v_at    timestamptz;
    v_n     bigint := 0;
    v_x     pg_catalog.text;
    v_row   other_table%ROWTYPE;
    v_key   keys_table.key%TYPE;
BEGIN
    v_at := pg_catalog.now() + lower('x')::interval;
    PERFORM 'x'::regtype, 'y'::pg_catalog.oid, upper(v_x);
END;
`, funcs, types, rels)
	want := func(what string, got map[string]bool, names ...string) {
		t.Helper()
		if len(got) != len(names) {
			t.Errorf("%s: found %v, want %v", what, got, names)
		}
		for _, n := range names {
			if !got[n] {
				t.Errorf("%s: found %v, want %v", what, got, names)
			}
		}
	}
	want("functions", funcs, "lower", "upper")
	want("types", types, "timestamptz", "regtype")
	want("relations", rels, "other_table", "keys_table")
}

// catalogTypeNames are pg_catalog's types whose names are no keyword of
// the grammar, so that DDL that names them unqualified finds them through
// the search_path (bigint, boolean, integer are keywords that name
// pg_catalog's directly). name is left out: the outbox has a column of
// that name, and no column of that type.
var catalogTypeNames = map[string]bool{
	"bool": true, "bytea": true, "date": true, "float4": true, "float8": true, "inet": true,
	"int2": true, "int4": true, "int8": true, "json": true, "jsonb": true, "oid": true,
	"record": true, "regclass": true, "regtype": true, "text": true, "timestamptz": true,
	"uuid": true, "void": true,
}

// migrationDDLTypes returns the names of pg_catalog's types that the
// PostgreSQL migrations' DDL, outside the functions' bodies and comments,
// names: the columns', the parameters' and the results' types.
func migrationDDLTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../templates/sql/postgres*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations found: %v", err)
	}
	strip := regexp.MustCompile(`(?s)\$\$.*?\$\$|--[^\n]*|'[^']*'|"[^"]*"`)
	word := regexp.MustCompile(`[\w.]+`)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range word.FindAllString(strip.ReplaceAllString(string(b), " "), -1) {
			if w = strings.ToLower(w); catalogTypeNames[w] {
				names = append(names, w)
			}
		}
	}
	return names
}

// migrationBodies returns the bodies ($$ ... $$) of the functions the
// PostgreSQL migrations create.
func migrationBodies(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../templates/sql/postgres*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no PostgreSQL migrations found: %v", err)
	}
	re := regexp.MustCompile(`(?is)CREATE (?:OR REPLACE )?FUNCTION .*?\$\$(.*?)\$\$`)
	var bodies []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			bodies = append(bodies, m[1])
		}
	}
	if len(bodies) == 0 {
		t.Fatal("the migrations create no function")
	}
	return bodies
}

// declaration is a line of a plpgsql DECLARE section: a variable, its
// type, and the rest.
var declaration = regexp.MustCompile(`(?m)^\s*\w+\s+([\w.]+)(%ROWTYPE|%TYPE)?`)

// bodyNames adds to funcs, types and rels what body, a function's, finds
// by the search_path: the functions it calls unqualified (but the
// store's own), the types it declares its variables of or casts to
// unqualified (but the words of the grammar, which name pg_catalog's),
// and the relations of its %ROWTYPE and %TYPE declarations.
func bodyNames(body string, funcs, types, rels map[string]bool) {
	for _, name := range sqlqualified.Unqualified(body, storeFunctionNames()...) {
		funcs[strings.ToLower(name)] = true
	}
	for _, op := range sqlqualified.Operators(body) {
		if name, ok := strings.CutPrefix(op, "::"); ok {
			types[strings.ToLower(name)] = true
		}
	}
	if start, end := strings.Index(body, "DECLARE"), strings.Index(body, "BEGIN"); start >= 0 && end > start {
		for _, m := range declaration.FindAllStringSubmatch(body[start+len("DECLARE"):end], -1) {
			name := strings.ToLower(m[1])
			switch {
			case m[2] == "%ROWTYPE":
				rels[name] = true
			case m[2] == "%TYPE":
				rels[name[:max(strings.LastIndex(name, "."), 0)]] = true
			case strings.HasPrefix(name, "pg_catalog.") || sqlqualified.KeywordType(name):
			default:
				types[name] = true
			}
		}
	}
}

// storeFunctionNames are the names of storeFunctionsSQL.
func storeFunctionNames() []string {
	return strings.Split(strings.Trim(strings.TrimSuffix(storeFunctionsSQL, "::pg_catalog.name[]"), "'{}"), ",")
}
