package pgstore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
