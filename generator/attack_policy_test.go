package generator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// TestAttackOutputsDoNotOverwriteEachOther: two outputs with one path,
// or an output at the spec's own path, are a mistake in the options that
// generate carries out: --docs openapi.yaml writes the Markdown page over
// the spec, --docs api/idempotency.lock.json over the lock file. The
// client directory equal to the Go directory is refused already; these
// should be too.
func TestAttackOutputsDoNotOverwriteEachOther(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	for _, docs := range []string{"openapi.yaml", "api/idempotency.lock.json", "api/idempotency.idem.go"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		files, diags, err := Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Docs: docs, Dir: dir})
		if err != nil || model.HasErrors(diags) {
			t.Logf("--docs %s: refused: %v %s", docs, err, diagText(diags))
			continue // refused
		}
		t.Errorf("--docs %s is generated over another file (%d files, the page among them), and nothing refuses it", docs, len(files))
	}
}
