package generator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// Real specs live beside the repository, not in it: they are large and
// not ours. Tests that need them skip when they are absent.
var realSpecs = filepath.Join("..", "..", "shared", "specs")

func realSpec(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(realSpecs, name))
	if os.IsNotExist(err) {
		tb.Skipf("real spec %s is not available next to the repository (../shared/specs); skipping", name)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// annotate adds "x-idempotency: true" to every POST operation of the
// document and a document-level default, editing the YAML node tree so the
// rest of the spec stays as it was. It returns the new document and how
// many operations it annotated.
func annotate(tb testing.TB, data []byte) ([]byte, int) {
	tb.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		tb.Fatal(err)
	}
	root := doc.Content[0]
	paths := mapValue(root, "paths")
	if paths == nil {
		tb.Fatal("spec has no paths")
	}
	n := 0
	for i := 1; i < len(paths.Content); i += 2 {
		post := mapValue(paths.Content[i], "post")
		if post == nil || post.Kind != yaml.MappingNode {
			continue
		}
		post.Content = append(post.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x-idempotency"},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"},
		)
		n++
	}
	defaults := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "key"},
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "header:Idempotency-Key"},
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "ttl"},
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "24h"},
	}}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "x-idempotency"}, defaults)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		tb.Fatal(err)
	}
	return out, n
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// generateReal annotates a real spec in a temporary project, generates
// from it and checks the result: every POST is an operation, there are no
// errors, and the output compiles against this repository's runtime.
func generateReal(t *testing.T, name string, wantOps int) {
	data, n := annotate(t, realSpec(t, name))
	if wantOps > 0 && n != wantOps {
		t.Fatalf("annotated %d POST operations, want %d", n, wantOps)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Spec: "openapi.yaml", Out: "api", Package: "api", Migrations: "migrations", Docs: "idempotency.md", Dir: dir}
	start := time.Now()
	files, diags, err := Generate(context.Background(), opts)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	errs, warns := model.CountErrors(diags)
	if errs > 0 {
		for _, d := range diags {
			if d.Severity == model.Error {
				t.Error(d.String())
			}
		}
		t.FailNow()
	}
	src := files["api/idempotency.idem.go"]
	t.Logf("%s: %d operations, %d warnings, %d bytes of Go, generated in %v", name, n, warns, len(src), elapsed)
	for _, d := range diags {
		t.Log(d.String())
	}
	if err := WriteDir(dir, files); err != nil {
		t.Fatal(err)
	}
	if got := countPolicies(src); got != n {
		t.Errorf("generated %d policy functions, want %d", got, n)
	}
	// Compiling is not enough: such output has compiled and then failed
	// to start. The program builds the engine from the generated policies
	// and checks that a mux routing every operation below the spec's base
	// path (Adyen's /v71) passes CheckRoutes.
	spec, _, err := checkSpec(context.Background(), filepath.Join(dir, "openapi.yaml"), "openapi.yaml", "")
	if err != nil || spec == nil {
		t.Fatalf("loading the spec again: %v", err)
	}
	program := strings.Replace(startEngine, `const prefix = ""`, fmt.Sprintf("const prefix = %q", spec.BasePath), 1)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	goInModule(t, dir, "run", ".")
}

// startEngine is a program that starts the engine from the generated
// policies of package api and checks its routes on a mux that serves every
// operation below prefix, the spec's base path, which the generated
// NewEngine knows without being told: it exits non-zero when either fails.
const startEngine = `package main

import (
	"fmt"
	"net/http"
	"os"

	"example.com/realspec/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	e, err := api.NewEngine(idem.Config{Store: memstore.New(), Tenant: func(*http.Request) (string, bool) { return "t", true }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	const prefix = ""
	mux := http.NewServeMux()
	for _, p := range api.Policies() {
		mux.Handle(p.Method+" "+prefix+p.Path, http.NotFoundHandler())
	}
	if err := e.CheckRoutes(idem.BehindMiddleware, mux.Handler); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`

// countPolicies counts the generated policy functions.
func countPolicies(src []byte) int {
	n := 0
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "func ") && strings.HasSuffix(line, "Policy() idem.Policy {") {
			n++
		}
	}
	return n
}

// goInModule makes dir a module of its own that uses this checkout of
// idemgen and runs the go command in it with args.
func goInModule(t *testing.T, dir string, args ...string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join(".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod := fmt.Sprintf("module example.com/realspec\n\ngo 1.26.8\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => %s\n", root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		// Name the checkout neutrally: the output is read elsewhere.
		t.Fatalf("go %s on the generated code: %v\n%s", strings.Join(args, " "), err, strings.ReplaceAll(string(out), root, "<idemgen>"))
	}
}

func TestStripeAllPosts(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and compiles the 4 MB Stripe spec; skipped with -short")
	}
	generateReal(t, "stripe-spec3.yaml", 222)
}

func TestAdyenPosts(t *testing.T) {
	if testing.Short() {
		t.Skip("loads and compiles the Adyen spec; skipped with -short")
	}
	generateReal(t, "adyen-CheckoutService-v71.json", 0)
}

// BenchmarkGenerateStripe measures Generate on the Stripe spec with all
// 222 POST operations annotated, against kin-openapi loading the same
// document alone in the same run. x-vs-load is the ratio of the two; the
// goal is at most 1.5: idemgen's own work should cost no more than half of
// what parsing the spec already does.
func BenchmarkGenerateStripe(b *testing.B) {
	data, _ := annotate(b, realSpec(b, "stripe-spec3.yaml"))
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	opts := Options{Spec: "openapi.yaml", Out: "api", Package: "api", Migrations: "migrations", Dir: dir}
	ctx := context.Background()
	var load, gen time.Duration
	for b.Loop() {
		start := time.Now()
		// What a plain kin-openapi user pays: read the file, parse, resolve.
		raw, err := os.ReadFile(filepath.Join(dir, "openapi.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := openapi3.NewLoader().LoadFromData(raw); err != nil {
			b.Fatal(err)
		}
		load += time.Since(start)

		start = time.Now()
		if _, _, err := Generate(ctx, opts); err != nil {
			b.Fatal(err)
		}
		gen += time.Since(start)
	}
	b.ReportMetric(float64(gen)/float64(load), "x-vs-load")
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms/op")
	b.ReportMetric(float64(gen.Milliseconds())/float64(b.N), "generate-ms/op")
}
