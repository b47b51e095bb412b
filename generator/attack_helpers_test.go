package generator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// These tests hold the generator to its contract on specs and projects
// that are odd or hostile: each either gets the declared policy into the
// generated code or is refused with a clear error. Each one fails on the
// code it was written against; the comment says what it found.

// generateIn writes spec as openapi.yaml in dir and generates from it
// with opts (Spec, Out, Package and Dir are filled in).
func generateIn(t *testing.T, dir, spec string, opts Options) (map[string][]byte, []model.Diagnostic) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	opts.Spec, opts.Out, opts.Package, opts.Dir = "openapi.yaml", "api", "api", dir
	files, diags, err := Generate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return files, diags
}
