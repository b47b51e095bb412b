package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/examples/petstore-payments/lab/labtest"
	"github.com/idemgen/idemgen/generator"
)

// The versions of oapi-codegen and its runtime the proof uses; they come
// from the Go module proxy into a module of the test's own, so that the
// project's go.mod never depends on them.
const (
	oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2@v2.8.2"
	oapiRuntime = "github.com/oapi-codegen/runtime@v1.9.0"
)

// TestOapiCodegenClient proves the augmented spec on a real client
// generator: the example's spec, stripped of the key parameters and the
// 409 and 422 answers it declares by hand, is augmented by idemgen, and
// oapi-codegen (client and types) generates from it a client that has the
// key parameter and typed 409 and 422 problems; the client then drives
// the running service, which answers a retry with a replay and a reused
// key with a typed 422.
func TestOapiCodegenClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds oapi-codegen")
	}
	dir := t.TempDir()
	spec := strippedSpec(t)
	if err := os.WriteFile(filepath.Join(dir, "openapi.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	files, diags, err := generator.Generate(context.Background(), generator.Options{
		Spec: "openapi.yaml", Out: "api", Package: "api", Dir: dir, AugmentedSpec: "openapi.augmented.yaml",
	})
	if err != nil || files == nil {
		t.Fatalf("generate: %v %v", err, diags)
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.augmented.yaml"), files["openapi.augmented.yaml"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "client"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module oapiproof\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(driver), 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// Without the module proxy (or a module cache holding these versions)
	// the proof cannot run; that is a failure to report, not a reason to
	// pass quietly.
	cmd := exec.Command("go", "get", oapiCodegen, oapiRuntime)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("this test needs %s and %s from the Go module proxy (GOPROXY) or the module cache, and could not get them: %v\n%s", oapiCodegen, oapiRuntime, err, out)
	}
	goCmd("run", strings.Split(oapiCodegen, "@")[0]+"/cmd/oapi-codegen",
		"-generate", "types,client", "-package", "client", "-o", "client/client.gen.go", "openapi.augmented.yaml")
	goCmd("build", "./...")

	srv := bins.StartServer(t, labtest.SQLiteURL(t))
	out := goCmd("run", ".", srv.URL, labtest.KeyAcme)
	var got struct {
		First, Replay, Reused int
		Replayed              string
		ReusedType            string
	}
	if err := json.Unmarshal([]byte(out[strings.LastIndex(out, "{"):]), &got); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	if got.First != 201 || got.Replay != 201 || got.Replayed != "true" {
		t.Errorf("first %d, retry %d with Idempotent-Replayed %q; want 201, 201 and a replay", got.First, got.Replay, got.Replayed)
	}
	if got.Reused != 422 || !strings.HasSuffix(got.ReusedType, "/idempotency-key-reused") {
		t.Errorf("reused key: %d with a typed problem of type %q; want 422 idempotency-key-reused", got.Reused, got.ReusedType)
	}
}

// strippedSpec is the example's spec without what it declares by hand of
// the idempotency layer (the key parameters, the 409 and 422 answers), as
// a spec written without idemgen in mind would be.
func strippedSpec(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Load(src, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	var strip func(m *yaml.Node)
	strip = func(m *yaml.Node) {
		if m.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(m.Content); i += 2 {
				k, v := m.Content[i].Value, m.Content[i+1]
				switch {
				case k == "parameters" && v.Kind == yaml.SequenceNode:
					kept := v.Content[:0]
					for _, p := range v.Content {
						if ref := p.Content; len(ref) == 2 && strings.Contains(ref[1].Value, "IdempotencyKey") {
							n++
							continue
						}
						kept = append(kept, p)
					}
					v.Content = kept
				case k == "responses":
					kept := v.Content[:0]
					for j := 0; j+1 < len(v.Content); j += 2 {
						if code := v.Content[j].Value; code == "409" || code == "422" {
							n++
							continue
						}
						kept = append(kept, v.Content[j], v.Content[j+1])
					}
					v.Content = kept
				}
			}
		}
		for _, c := range m.Content {
			strip(c)
		}
	}
	strip(&doc)
	if n == 0 {
		t.Fatal("nothing stripped: the example's spec changed shape")
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// driver uses the generated client as a user would: the key is a field of
// the operation's parameters, the 422 a typed problem. It prints what it
// saw as JSON. The 409 is named too, so that the program compiles only if
// oapi-codegen typed it.
const driver = `package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	"oapiproof/client"
)

func main() {
	c, err := client.NewClientWithResponses(os.Args[1], client.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+os.Args[2])
		return nil
	}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	key := rand.Text()
	create := func(body string) *client.CreatePetResponse {
		resp, err := c.CreatePetWithBodyWithResponse(ctx, &client.CreatePetParams{IdempotencyKey: &key}, "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		return resp
	}
	first := create(` + "`" + `{"name":"Rex","species":"dog"}` + "`" + `)
	replay := create(` + "`" + `{"name":"Rex","species":"dog"}` + "`" + `)
	reused := create(` + "`" + `{"name":"Tom","species":"cat"}` + "`" + `)
	var conflict *client.IdempotencyProblem = reused.ApplicationproblemJSON409
	_ = conflict
	out := map[string]any{
		"first":    first.StatusCode(),
		"replay":   replay.StatusCode(),
		"replayed": replay.HTTPResponse.Header.Get("Idempotent-Replayed"),
		"reused":   reused.StatusCode(),
	}
	if p := reused.ApplicationproblemJSON422; p != nil {
		out["reusedType"] = p.Type
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
`
