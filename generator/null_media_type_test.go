package generator

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// TestMediaTypeWithoutAValueDoesNotCrash: a request body's media type
// written with nothing under it (application/json: and then the next
// key one level out, or an explicit ~) is a null Media Type Object. The
// loader reads the chosen media type's schema through a nil pointer and
// generate and validate crash with a stack trace instead of reporting
// the line, for a spec of a few hundred bytes.
func TestMediaTypeWithoutAValueDoesNotCrash(t *testing.T) {
	for name, media := range map[string]string{
		"nothing under it": "application/json:\n",
		"a null":           "application/json: ~\n",
	} {
		t.Run(name, func(t *testing.T) {
			spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /refunds:
    post:
      operationId: createRefund
      x-idempotency: true
      requestBody:
        content:
          ` + media + `      responses:
        '201': {description: created}
`
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
				t.Fatal(err)
			}
			var diags []model.Diagnostic
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("generate panics on a request body whose media type has no value (%s): %v", name, r)
					}
				}()
				_, diags, _ = Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Dir: dir})
			}()
			t.Logf("diagnostics:\n%s", diagText(diags))
		})
	}
}
