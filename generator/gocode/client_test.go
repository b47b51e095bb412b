package gocode

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The client table holds each operation's key source, TTL and retry
// budget, and none of the server's settings.
func TestEmitClientTable(t *testing.T) {
	spec := paymentsSpec()
	spec.Operations[0].Policy.ClientRetryBudget = 10 * time.Minute
	src, diags, err := Emit(spec, Options{Package: "api", Source: "../openapi.yaml"})
	if err != nil || len(diags) > 0 {
		t.Fatalf("Emit: %v %v", err, diags)
	}
	out := string(src)
	i := strings.Index(out, "func ClientOperations() []idemclient.Operation {")
	if i < 0 {
		t.Fatalf("no client table in\n%s", out)
	}
	table := out[i:]
	table = table[:strings.Index(table, "\n}\n")]
	for _, want := range []string{
		`"github.com/idemgen/idemgen/runtime/idemclient"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the file lacks %s", want)
		}
	}
	for _, want := range []string{
		"ID:           OpCreateTransfer,",
		`Path:         "/transfers",`,
		`Key:          idemclient.Key{In: key.InHeader, Name: "Idempotency-Key"},`,
		"TTL:          7 * 24 * time.Hour,",
		"RetryBudget:  10 * time.Minute,",
		`Key:          idemclient.Key{In: key.InBody, Name: "/idempotency_key"},`,
		"KeyMaxLength: 64,",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the client table lacks %q:\n%s", want, table)
		}
	}
	for _, server := range []string{"Lease", "Fingerprint", "MaxSnapshotBytes", "Transactional", "Scope"} {
		if strings.Contains(table, server) {
			t.Errorf("the client table holds the server's %s:\n%s", server, table)
		}
	}
	if strings.Count(table, "RetryBudget") != 1 {
		t.Errorf("RetryBudget written for an operation without one:\n%s", table)
	}
}

// The client table's own package builds in a client module that depends
// on neither the server engine nor a database driver: go list -deps finds
// idemclient among its dependencies, and no runtime/idem, pgx or SQLite.
func TestClientPackageImportsNoServerCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	src, diags, err := EmitClient(paymentsSpec(), Options{Package: "apiclient", Source: "../openapi.yaml"})
	if err != nil || len(diags) > 0 {
		t.Fatalf("EmitClient: %v %v", err, diags)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                   "module clientproof\n\ngo 1.26\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => " + root + "\n",
		"apiclient/client.idem.go": string(src),
		"main.go": `package main

import (
	"fmt"

	"clientproof/apiclient"
	"github.com/idemgen/idemgen/runtime/idemclient"
)

func main() {
	t, err := idemclient.New(idemclient.Config{Operations: apiclient.ClientOperations()})
	fmt.Println(t != nil, err)
}
`,
	}
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
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
	goCmd("build", "./...")
	deps := strings.Fields(goCmd("list", "-deps", "./..."))
	if !slices.Contains(deps, "github.com/idemgen/idemgen/runtime/idemclient") {
		t.Fatalf("idemclient is not among the client module's dependencies: %v", deps)
	}
	for _, d := range deps {
		if d == "github.com/idemgen/idemgen/runtime/idem" || strings.HasPrefix(d, "github.com/jackc/") ||
			strings.Contains(d, "sqlite") || strings.Contains(d, "pgstore") || strings.Contains(d, "redis") {
			t.Errorf("the client module depends on server code: %s", d)
		}
	}
}
