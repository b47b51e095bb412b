package generator

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// generateFrom writes spec as openapi.yaml in a temporary project and
// generates from it, failing the test on any error diagnostic.
func generateFrom(t *testing.T, spec string) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	files, diags, err := Generate(context.Background(), Options{
		Spec: "openapi.yaml", Out: "api", Package: "api", Docs: "api/IDEMPOTENCY.md", Dir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if model.HasErrors(diags) {
		t.Fatalf("generation failed:\n%s", diagText(diags))
	}
	return files
}

// topLevelNames parses a generated Go file and lists what it declares at
// the top level, with init functions and methods counted by name.
func topLevelNames(t *testing.T, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "idempotency.idem.go", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("generated Go does not parse: %v\n%s", err, src)
	}
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			names = append(names, d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names = append(names, n.Name)
					}
				case *ast.TypeSpec:
					names = append(names, s.Name.Name)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

// TestOperationIDCannotInjectGo: an operationId cannot inject Go. A
// word-wrapped doc comment whose line starts with the operationId's "/**/"
// must stay a comment; written as code, it would make every program
// importing the package panic at start-up.
func TestOperationIDCannotInjectGo(t *testing.T) {
	id := strings.Repeat("a", 69) + ` /**/func/**/init(){panic(\"x\")}//`
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /pay ments/*/x:
    post:
      operationId: "` + id + `"
      x-idempotency: {transactional: true}
      responses: {"200": {description: ok}}
`
	files := generateFrom(t, spec)
	src := files["api/idempotency.idem.go"]
	got := topLevelNames(t, src)
	want := []string{"ClientOperations", "NewEngine", "Policies", "StrictRequestError"}
	goName := "A" + strings.Repeat("a", 68) + "FuncInitPanicX"
	want = append(want, goName, goName+"Tx", "Op"+goName, goName+"Policy")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("top-level names = %v, want %v\n%s", got, want, src)
	}
}

// hostilePieces are what the property test builds spec strings from: the
// openers and closers of Go comments and Markdown syntax, quotes, line
// breaks of every kind, bidi and zero-width characters, build-constraint
// and directive look-alikes, and words long enough to be wrapped alone.
var hostilePieces = []string{
	"*/", "/*", "//", "/**/", `"`, "'", "`", "```", "\\", "\n", "\r\n", "\r", "\t",
	"\u2028", "\u2029", "\u0085", "\u202e", "\u2066", "\u2069", "\u200b", "\u200f", "\ufeff", "\x00", "\x1b[31m",
	"|", "<", ">", "<script>alert(1)</script>", "<!--", "-->", "[x](https://example.com)", "![i](x.png)",
	"&lt;", "#", "*", "_", "~~", "$x$", "+build ignore", "go:generate rm -rf /", "//go:build ignore",
	"func init() { panic(1) }", "package main", "}", "{",
	strings.Repeat("a", 70), strings.Repeat("Z", 80), "é", "支払い", "e\u0301",
	" ", " ", "x", "pay", "-", ".",
}

func hostileString(rng *rand.Rand) string {
	var b strings.Builder
	for n := 1 + rng.IntN(8); n > 0; n-- {
		b.WriteString(hostilePieces[rng.IntN(len(hostilePieces))])
	}
	return b.String()
}

// hostileSpec returns a JSON spec with n annotated operations whose
// operationIds, paths, summaries and title come from hostileString. The
// operationIds end in a distinct word so that their Go names differ.
func hostileSpec(rng *rand.Rand, n int) []byte {
	paths := map[string]any{}
	for i := range n {
		// Braces, query and fragment marks and escapes are left out of
		// paths: path templates are checked elsewhere (the runtime's
		// parser refuses them); here only their text matters.
		path := "/" + strings.NewReplacer("{", "(", "}", ")", "?", "_", "#", "_", "%", "_").Replace(hostileString(rng)) + fmt.Sprintf("/n%d", i)
		op := map[string]any{
			"operationId":   hostileString(rng) + fmt.Sprintf(" q%dq", i),
			"summary":       hostileString(rng),
			"x-idempotency": map[string]any{"transactional": rng.IntN(2) == 0},
			"responses":     map[string]any{"200": map[string]any{"description": "ok"}},
		}
		paths[path] = map[string]any{"post": op}
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": hostileString(rng), "version": hostileString(rng)},
		"paths":   paths,
	}
	data, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return data
}

// TestHostileSpecsDeclarePoliciesOnly is the property that no string in a
// spec can change what the generated code does: for random specs whose
// every string is built to break out of a comment, a string or a Markdown
// table, the Go parses, declares exactly the names expected of its
// operations, and passes go vet (run once over the whole batch), and the
// docs page has one table row per operation.
func TestHostileSpecsDeclarePoliciesOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet over a batch of generated packages; skipped with -short")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x1de))
	const cases = 60
	batch := t.TempDir()
	for c := range cases {
		n := 1 + rng.IntN(4)
		data := hostileSpec(rng, n)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "openapi.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("p%03d", c)
		opts := Options{Spec: "openapi.json", Out: pkg, Package: pkg, Docs: pkg + "/IDEMPOTENCY.md", Dir: dir}
		files, diags, err := Generate(context.Background(), opts)
		if err != nil || model.HasErrors(diags) {
			t.Fatalf("case %d: Generate: %v\n%s\nspec: %s", c, err, diagText(diags), data)
		}
		spec, vrep, err := Validate(context.Background(), filepath.Join(dir, "openapi.json"))
		if err != nil || spec == nil {
			t.Fatalf("case %d: Validate: %v\n%s", c, err, diagText(vrep.Diagnostics))
		}
		if len(spec.Operations) != n {
			t.Fatalf("case %d: %d operations, want %d", c, len(spec.Operations), n)
		}
		want := []string{"ClientOperations", "NewEngine", "Policies", "StrictRequestError"}
		for _, op := range spec.Operations {
			want = append(want, "Op"+op.GoName, op.GoName+"Policy")
			if op.Policy.Transactional {
				want = append(want, op.GoName, op.GoName+"Tx")
			}
		}
		slices.Sort(want)
		src := files[pkg+"/idempotency.idem.go"]
		if got := topLevelNames(t, src); !slices.Equal(got, want) {
			t.Fatalf("case %d: declares %v, want %v\nspec: %s\n%s", c, got, want, data, src)
		}
		checkDocsPage(t, string(files[pkg+"/IDEMPOTENCY.md"]), n, data)
		if err := WriteDir(filepath.Join(batch, pkg), map[string][]byte{"idempotency.idem.go": src}); err != nil {
			t.Fatal(err)
		}
	}
	goInModule(t, batch, "vet", "./...")
}

// checkDocsPage checks that the page's summary table has exactly one row
// per operation, each of five cells, and that no spec string added a
// heading or raw HTML.
func checkDocsPage(t *testing.T, page string, ops int, spec []byte) {
	t.Helper()
	lines := strings.Split(page, "\n")
	rows, headings := 0, 0
	inTable := false
	for i, line := range lines {
		if strings.HasPrefix(line, "## ") {
			headings++
		}
		if !strings.HasPrefix(line, "<!-- ") && rawHTML(line) {
			t.Errorf("line %d holds raw HTML: %q\nspec: %s", i+1, line, spec)
		}
		switch {
		case line == "|---|---|---|---|---|":
			inTable = true
			continue
		case !strings.HasPrefix(line, "|"):
			inTable = false
		}
		if !inTable {
			continue
		}
		rows++
		if cells := tableCells(line); cells != 5 {
			t.Errorf("row %q has %d cells, want 5\nspec: %s", line, cells, spec)
		}
	}
	if rows != ops {
		t.Errorf("the table has %d rows, want %d\nspec: %s\n%s", rows, ops, spec, page)
	}
	// One heading per operation, and the errors section.
	if headings != ops+1 {
		t.Errorf("the page has %d headings, want %d\nspec: %s\n%s", headings, ops+1, spec, page)
	}
}

// tableCells counts the cells of a GitHub table row: cells are separated
// by "|" not escaped with a backslash.
func tableCells(row string) int {
	n := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			n++
		}
	}
	return n - 1
}

// rawHTML reports whether a Markdown line has a "<" that a renderer would
// read as the start of HTML or an autolink: one neither escaped with a
// backslash nor inside a code span.
func rawHTML(line string) bool {
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case '`':
			n := 1
			for i+n < len(line) && line[i+n] == '`' {
				n++
			}
			fence := strings.Repeat("`", n)
			end := strings.Index(line[i+n:], fence)
			if end < 0 {
				i += n - 1 // an unclosed run is literal text
				continue
			}
			i += n + end + n - 1
		case '<':
			return true
		}
	}
	return false
}
