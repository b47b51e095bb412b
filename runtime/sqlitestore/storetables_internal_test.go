package sqlitestore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// storeTables and storeIndexes, which the authorizer keeps a handler's
// objects away from, are the tables and indexes the migrations create: a
// table or an index a later migration adds is guarded too, or this fails.
func TestStoreTablesAreTheMigrations(t *testing.T) {
	for kind, guarded := range map[string]map[string]bool{"TABLE": storeTables, "INDEX": storeIndexes} {
		t.Run(kind, func(t *testing.T) { guardsTheMigrations(t, kind, guarded) })
	}
}

// guardsTheMigrations checks that guarded names exactly the objects of
// kind (TABLE or INDEX) that the migrations create.
func guardsTheMigrations(t *testing.T, kind string, guarded map[string]bool) {
	files, err := filepath.Glob("../../templates/sql/sqlite*.up.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no SQLite migrations found: %v", err)
	}
	created := map[string]bool{}
	table := regexp.MustCompile(`(?i)CREATE (?:UNIQUE )?` + kind + ` (?:IF NOT EXISTS )?(\w+)`)
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
		if !guarded[name] {
			t.Errorf("the migrations create %s, which the authorizer does not guard", name)
		}
	}
	for name := range guarded {
		if !created[name] {
			t.Errorf("the authorizer guards %s, which no migration creates", name)
		}
	}
}
