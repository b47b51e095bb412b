package generator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// The check that every output has a path of its own compared the spec,
// the Go code, the lock file, the docs page, the overlay, the augmented
// spec and the client table, but not the migrations generate writes:
// --docs at a migration's path wrote the Markdown page and the migration
// to one path, and one of them was lost (in the map Generate returns,
// and on disk).
func TestDocsOverAMigrationIsRefused(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	// The migration's name, as generate writes it without the page.
	files, diags, err := Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Migrations: "db", Dir: dir})
	if err != nil || model.HasErrors(diags) {
		t.Fatalf("%v %s", err, diagText(diags))
	}
	var migration string
	for name := range files {
		if strings.HasSuffix(name, ".sql") && strings.Contains(name, "up") {
			migration = name
		}
	}
	if migration == "" {
		t.Fatalf("no up migration among %d files", len(files))
	}
	rel, err := filepath.Rel(dir, migration)
	if err != nil {
		rel = migration
	}
	files, diags, err = Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Migrations: "db", Docs: rel, Dir: dir})
	if err != nil || model.HasErrors(diags) {
		t.Logf("refused: %v %s", err, diagText(diags))
		return
	}
	t.Fatalf("--docs %s, a migration's path, is not refused; what generate writes there begins %q", rel, firstLine(files[migration]))
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
