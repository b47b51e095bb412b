package sqlitestore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// storeTables, which the authorizer keeps a handler's objects away from,
// are the tables the migrations create: a table a later migration adds
// is guarded too, or this fails.
func TestStoreTablesAreTheMigrations(t *testing.T) {
	files, err := filepath.Glob("../../templates/sql/sqlite*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no SQLite migrations found: %v", err)
	}
	created := map[string]bool{}
	table := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?(\w+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range table.FindAllStringSubmatch(string(b), -1) {
			created[strings.ToLower(m[1])] = true
		}
	}
	for name := range created {
		if !storeTables[name] {
			t.Errorf("the migrations create %s, which storeTables does not guard", name)
		}
	}
	for name := range storeTables {
		if !created[name] {
			t.Errorf("storeTables guards %s, which no migration creates", name)
		}
	}
}
