package templates_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/sqlgen"
)

// createTable finds a statement that creates one of idemgen's tables.
var createTable = regexp.MustCompile(`(?i)CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?"?idempotency_(keys|phases|outbox)\b`)

// TestOneSourceOfSchema holds every table's SQL to one place, sql/: the
// runtime's Migrate functions read it from there and idemgen writes it as
// migration files, so a copy elsewhere in the repository (one that a store
// embeds, a string in its code) could drift from the migrations a tool
// applies. Generated migrations (idemgen's header on the first line) and
// test fixtures (testdata, _test.go, such as the released schemas the
// upgrade tests start from) are not sources.
func TestOneSourceOfSchema(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(root, "templates", "sql")
	var copies []string
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || p == own) {
				return filepath.SkipDir
			}
			return nil
		}
		name := e.Name()
		if !(strings.HasSuffix(name, ".sql") || strings.HasSuffix(name, ".go")) || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !createTable.Match(text) || generated(text) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		copies = append(copies, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range copies {
		t.Errorf("%s creates one of idemgen's tables: read the SQL from templates (Schema, PhaseSchema, OutboxSchema) instead of copying it", c)
	}
}

// generated reports whether text starts with idemgen's migration header.
func generated(text []byte) bool {
	line, _, _ := strings.Cut(string(text), "\n")
	return strings.TrimSuffix(line, "\r") == sqlgen.Header
}
