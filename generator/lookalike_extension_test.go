package generator

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// An x-idempotency spelt with look-alike characters is an error, by a
// table of Cyrillic and Greek look-alikes and dashes, and one or two
// letters off is a warning. Latin's dotless ı and Armenian's օ and ո,
// which read as i, o and n in most fonts, are on no table: three of them
// make a key that reads as x-idempotency in an editor and a diff, is more
// than two letters off, and is ignored without a word, its operation
// shipped unprotected. And another case (X-Idempotency), the likeliest
// slip, only warns: the build goes on with the operation unprotected.
func TestLookalikeExtensionsAreRefused(t *testing.T) {
	for _, name := range []string{"x-ıdempօteոcy", "X-Idempotency"} {
		t.Run(name, func(t *testing.T) {
			spec := `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      "` + name + `": true
      responses: {"200": {description: ok}}
`
			files, diags := generateIn(t, t.TempDir(), spec, Options{})
			if model.HasErrors(diags) {
				return
			}
			if !strings.Contains(string(files["api/idempotency.idem.go"]), `"/pay"`) {
				t.Errorf("%q reads as x-idempotency; POST /pay has no policy and no error (diagnostics: %q)", name, diagText(diags))
			}
		})
	}
}
