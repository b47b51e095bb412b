package generator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validate must refuse what generate refuses: Go names that clash with the
// names the file always declares, or with another operation's.
func TestValidateFindsGoNameClashes(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency: {transactional: true}
paths:
  /a:
    post:
      operationId: policies
      x-idempotency: true
      responses: {"200": {description: ok}}
  /b:
    post:
      operationId: newEngine
      x-idempotency: true
      responses: {"200": {description: ok}}
  /c:
    post:
      operationId: x
      x-idempotency: true
      responses: {"200": {description: ok}}
  /d:
    post:
      operationId: OpX
      x-idempotency: true
      responses: {"200": {description: ok}}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	_, genDiags, err := Generate(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	parsed, valRep, err := Validate(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	if parsed != nil {
		t.Error("Validate returned a spec whose Go names clash")
	}
	gen := strings.ReplaceAll(diagText(genDiags), "openapi.yaml", "SPEC")
	val := strings.ReplaceAll(diagText(valRep.Diagnostics), file, "SPEC")
	if diff := cmp.Diff(gen, val); diff != "" {
		t.Errorf("validate and generate disagree (-generate +validate):\n%s", diff)
	}
	for _, want := range []string{"(policies): generated handler adapter Policies clashes", "(newEngine): generated handler adapter NewEngine clashes", "(OpX): generated handler adapter OpX clashes with the constant of POST /c (x)"} {
		if !strings.Contains(val, want) {
			t.Errorf("validate does not report %q:\n%s", want, val)
		}
	}
}

// validate and generate print the same diagnostics for one spec: a fault
// of the document that touches no annotated operation (here an unknown
// field of info) is reported by neither.
func TestValidateAndGenerateReportTheSameSet(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1", summry: typo}
paths:
  /a:
    post:
      operationId: a
      x-idempotency: true
      responses:
        "200":
          description: ok
          content:
            text/event-stream: {schema: {type: string}}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	_, genRep, err := Run(context.Background(), Options{Spec: "openapi.yaml", Out: "api", Package: "api", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, valRep, err := Validate(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	gen := strings.ReplaceAll(diagText(genRep.Diagnostics), "openapi.yaml", "SPEC")
	val := strings.ReplaceAll(diagText(valRep.Diagnostics), file, "SPEC")
	if diff := cmp.Diff(gen, val); diff != "" {
		t.Errorf("validate and generate disagree (-generate +validate):\n%s", diff)
	}
	if !strings.Contains(val, "text/event-stream") || strings.Count(val, "\n") != 1 {
		t.Errorf("want the one warning about the streamed response, got:\n%s", val)
	}
	if genRep.Operations != 1 || valRep.Operations != 1 {
		t.Errorf("operations counted: generate %d, validate %d, want 1", genRep.Operations, valRep.Operations)
	}
}
