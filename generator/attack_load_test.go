package generator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// TestAttackChainedPathItemRefKeepsPolicy: a path item that is a $ref to
// a path item that is itself a $ref (valid OpenAPI 3.1; ogen's parser
// follows the chain and serves the operation) must not lose the
// operation's x-idempotency without a word. The loader follows one $ref
// only, finds no operation, and generates a package with no policy:
// "0 errors, 0 warnings in 0 operations", POST /pay served unprotected.
func TestAttackChainedPathItemRefKeepsPolicy(t *testing.T) {
	spec := `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /pay:
    $ref: '#/components/pathItems/PayAlias'
components:
  pathItems:
    PayAlias:
      $ref: '#/components/pathItems/Pay'
    Pay:
      post:
        operationId: pay
        x-idempotency: {transactional: true}
        responses: {"200": {description: ok}}
`
	files, diags := generateIn(t, t.TempDir(), spec, Options{})
	if model.HasErrors(diags) {
		return // refused with a diagnostic: fine
	}
	src := string(files["api/idempotency.idem.go"])
	if !strings.Contains(src, `"/pay"`) {
		t.Errorf("POST /pay declares x-idempotency through a chain of path item $refs, but the generated code has no policy for it and no diagnostic says so (diagnostics: %q)", diagText(diags))
	}
}

// aliasDAG returns a spec of about 1.5 KB whose component schemas name
// the one before twice through YAML aliases: l0 is a string, l1 an
// object of two l0, and so on. Expanded, l(n-1) has 2^n nodes.
func aliasDAG(n int) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: '1'}\ncomponents:\n  schemas:\n")
	b.WriteString("    l0: &l0 {type: string}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "    l%d: &l%d {type: object, properties: {a: *l%d, b: *l%d}}\n", i, i, i-1, i-1)
	}
	b.WriteString(`paths:
  /pay:
    post:
      operationId: pay
      x-idempotency: true
      responses: {"200": {description: ok}}
`)
	return b.String()
}

// TestAttackAliasExpansionIsBounded: YAML aliases are a billion laughs
// for the loader. The loader checks alias cycles but not expansion, and
// kin-openapi decodes every alias as a copy, so a 1.5 KB spec with 16
// levels takes about 1 s and hundreds of MB, 18 levels about 4 s and
// 0.8 GB, and 24 levels does not finish (measured with idemgen
// validate), though no operation uses the schemas. A small input must
// load with small memory, or be refused.
func TestAttackAliasExpansionIsBounded(t *testing.T) {
	const levels = 16
	const budget = 64 << 20
	spec := aliasDAG(levels)
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := Validate(context.Background(), file)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte spec: %d MB allocated, err %v", len(spec), alloc>>20, err)
	if alloc > budget {
		t.Errorf("loading a %d-byte spec of %d alias levels allocated %d MB (budget %d MB); each further level doubles it",
			len(spec), levels, alloc>>20, budget>>20)
	}
}

// TestAttackPathItemRefSiblingKeepsPolicy: a path item with a $ref and an
// operation beside it. kin-openapi, which oapi-codegen routes from, reads
// the operation written beside the $ref (POST /pay, operationId local,
// with its x-idempotency), so the router serves it; the loader follows
// the $ref, ignores what stands beside it, and generates no policy and
// no diagnostic. The handler is served unprotected: a retry runs it
// again. OpenAPI leaves such siblings undefined, so either reading kin's
// way or refusing is fine; silence is not.
func TestAttackPathItemRefSiblingKeepsPolicy(t *testing.T) {
	spec := `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /pay:
    $ref: '#/components/pathItems/Pay'
    post:
      operationId: local
      x-idempotency: {transactional: true}
      responses: {"200": {description: ok}}
components:
  pathItems:
    Pay:
      post:
        operationId: target
        responses: {"200": {description: ok}}
`
	files, diags := generateIn(t, t.TempDir(), spec, Options{})
	if model.HasErrors(diags) {
		return // refused with a diagnostic: fine
	}
	if src := string(files["api/idempotency.idem.go"]); !strings.Contains(src, `"/pay"`) {
		t.Errorf("POST /pay (the operation kin-openapi and so the router read) declares x-idempotency, but the generated code has no policy for it and no diagnostic says so (diagnostics: %q)", diagText(diags))
	}
}

// TestAttackExternalPathItemIsNotIgnored: a spec split into files, as
// many are (paths: {/pay: {$ref: paths/pay.yaml}}), whose annotated
// operations live in the other file. idemgen reads one document, which
// is documented; but it sets the path item aside with a warning that
// says nothing it generates depends on it, and generates a package with
// no policy, while oapi-codegen (which follows external refs) serves
// POST /pay. An x-idempotency idemgen cannot read must stop generation.
func TestAttackExternalPathItemIsNotIgnored(t *testing.T) {
	dir := t.TempDir()
	item := `post:
  operationId: pay
  x-idempotency: {transactional: true}
  responses: {"200": {description: ok}}
`
	if err := os.MkdirAll(filepath.Join(dir, "paths"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "paths", "pay.yaml"), []byte(item), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    $ref: paths/pay.yaml
`
	files, diags := generateIn(t, dir, spec, Options{})
	if model.HasErrors(diags) {
		return // refused: the user is told to bundle the spec
	}
	if src := string(files["api/idempotency.idem.go"]); !strings.Contains(src, `"/pay"`) {
		t.Errorf("POST /pay, in a file the spec refers to, declares x-idempotency; idemgen generates no policy for it, with only this warning:\n%s", diagText(diags))
	}
}

// TestAttackAdditionalOperationsAreNotIgnored: OpenAPI 3.2's
// additionalOperations. kin-openapi lists them among a path item's
// operations (Operations() holds POST /pay from additionalOperations:
// {POST: …}), so a router generated from kin's model serves them; the
// loader looks only at the fixed method fields and drops their
// x-idempotency without a word: "0 operations". A policy there must be
// generated, or refused (POST belongs in the post field; LINK may not
// have one).
func TestAttackAdditionalOperationsAreNotIgnored(t *testing.T) {
	spec := `openapi: 3.2.0
info: {title: t, version: "1"}
paths:
  /pay:
    additionalOperations:
      POST:
        operationId: pay
        x-idempotency: {transactional: true}
        responses: {"200": {description: ok}}
`
	files, diags := generateIn(t, t.TempDir(), spec, Options{})
	if model.HasErrors(diags) {
		return // refused with a diagnostic: fine
	}
	if src := string(files["api/idempotency.idem.go"]); !strings.Contains(src, `"/pay"`) {
		t.Errorf("POST /pay in additionalOperations declares x-idempotency; kin-openapi serves it as POST /pay, and idemgen generates no policy and no diagnostic (diagnostics: %q)", diagText(diags))
	}
}

// TestAttackConfusableExtensionIsReported: an extension key spelt with
// Cyrillic letters that look like x-idempotency (х, і, е, р, о, с, у)
// reads as the extension in review, in an editor and in a PR diff, but
// is another key: idemgen ignores it without a word ("0 operations"),
// though it warns about x-idempotency with one such letter, as a near
// miss. The operation ships unprotected while its reviewer reads a
// policy on it.
func TestAttackConfusableExtensionIsReported(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      х-іdеmроtеnсу: {transactional: true}
      responses: {"200": {description: ok}}
`
	_, diags := generateIn(t, t.TempDir(), spec, Options{})
	if len(diags) == 0 {
		t.Errorf("an extension that reads as x-idempotency (Cyrillic look-alike letters) is ignored without a diagnostic")
	}
}

// TestAttackMisplacedExtensionIsReported: x-idempotency indented one
// level too deep (into the operation's requestBody, or among its
// responses) is a policy its author meant for the operation, and
// idemgen, which reads it only on operations, passes over it without a
// word ("0 operations"), though it warns about a path item's. The
// operation ships unprotected. An x-idempotency anywhere idemgen does
// not read it should be reported where it stands.
func TestAttackMisplacedExtensionIsReported(t *testing.T) {
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay:
    post:
      operationId: pay
      requestBody:
        x-idempotency: {transactional: true}
        content:
          application/json:
            schema: {type: object}
      responses:
        "200": {description: ok}
        x-idempotency: {transactional: true}
`
	if _, diags := generateIn(t, t.TempDir(), spec, Options{}); len(diags) == 0 {
		t.Errorf("x-idempotency written inside POST /pay's requestBody and responses is ignored without a diagnostic")
	}
}

// TestAttackSuggestionsAreLinear: "did you mean" compares a misspelt
// fingerprint pointer with every property name by full Levenshtein
// distance, O(len(a)·len(b)), though it only ever accepts a distance of
// at most 3. A spec of five 20,000-character property names and five
// 20,000-character pointers (200 KB) takes 36 s of CPU in idemgen
// validate; this one, 80 KB, takes several seconds. A distance bounded
// by 3 is a band of seven diagonals: linear in the names' length.
func TestAttackSuggestionsAreLinear(t *testing.T) {
	const length, names = 8000, 5
	var props, pointers []string
	for i := range names {
		props = append(props, fmt.Sprintf(`"p%d%s": {"type": "string"}`, i, strings.Repeat("a", length)))
		pointers = append(pointers, fmt.Sprintf(`"/q%d%s"`, i, strings.Repeat("b", length)))
	}
	spec := `{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {"/pay": {"post": {"operationId": "pay",
 "x-idempotency": {"fingerprint": [` + strings.Join(pointers, ", ") + `]},
 "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {` + strings.Join(props, ", ") + `}}}}},
 "responses": {"200": {"description": "ok"}}}}}}`
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, rep, err := Validate(context.Background(), file)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !model.HasErrors(rep.Diagnostics) {
		t.Fatalf("the missing pointers are not reported")
	}
	t.Logf("%d-byte spec: validated in %v", len(spec), took)
	if took > 1500*time.Millisecond {
		t.Errorf("validating a %d-byte spec took %v: its misspelt pointers are compared with its property names in time quadratic in their length", len(spec), took)
	}
}

// TestAttackOverlayTargetsTheOperation: with a path item that is a $ref
// (one level, which the loader follows and protects), the overlay's
// action targets $.paths['/pay'].post, which selects nothing in the spec:
// the operation lives under components.pathItems. Overlay tools apply an
// action that selects nothing as a no-op, so a client generated from the
// spec and the overlay never learns of the key parameter (with
// required: false its requests all run unprotected), and
// --augmented-spec stops with "selects nothing". The target must name
// the node that holds the operation.
func TestAttackOverlayTargetsTheOperation(t *testing.T) {
	spec := `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /pay:
    $ref: '#/components/pathItems/Pay'
components:
  pathItems:
    Pay:
      post:
        operationId: pay
        x-idempotency: true
        responses: {"200": {description: ok}}
`
	files, diags := generateIn(t, t.TempDir(), spec, Options{Overlay: "api/overlay.yaml"})
	if model.HasErrors(diags) {
		return // refused: fine
	}
	overlay := string(files["api/overlay.yaml"])
	if strings.Contains(overlay, "target: $.paths['/pay'].post") {
		t.Errorf("the overlay targets $.paths['/pay'].post, which selects nothing in the spec (POST /pay is in components.pathItems.Pay):\n%s", overlay)
	}
}
