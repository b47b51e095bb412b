package generator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/breaking"
	"github.com/idemgen/idemgen/generator/model"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/golden")

// goldenDir holds one directory per case: the input spec, optional
// options.json, and either want/ (the expected files) or stderr.txt (what
// the command prints on stderr: the diagnostics and the summary line), or
// both for a case that succeeds with warnings.
//
// A case that tests emission (the Go code's shape, the SQL, the docs page,
// the overlay, the client table) keeps every file the generator writes in
// want/. A case that tests the loader (what it makes of a spec: policies,
// diagnostics, the lock file) holds a file named loaderCase, one line
// saying what it tests; its want/ holds the lock file only, and the test
// compares its diagnostics and lock file, so that a change of the emitted
// code rewrites only the goldens of the cases that are about it.
var goldenDir = filepath.Join("..", "testdata", "golden")

// loaderCase is the marker file of a case that tests the loader.
const loaderCase = "loader.txt"

// caseOptions is options.json. Fields left out take the harness defaults,
// so a case states only what it is about.
type caseOptions struct {
	Spec       *string
	Out        *string
	Package    *string
	ClientOut  string
	Migrations *string
	Dialects   []string
	Layout     string
	Docs       string
	Overlay    string
	Store      string
	// MigrationVersion and MigrationTable: see Options.
	MigrationVersion string
	MigrationTable   string
	// AcceptBreaking: see Options. The previous lock file of a breaking
	// case is api/idempotency.lock.json in its directory.
	AcceptBreaking []string
}

func readCaseOptions(t *testing.T, dir string) Options {
	t.Helper()
	opts := Options{Out: "api", Package: "api", Migrations: "migrations", Dir: dir}
	for _, name := range []string{"spec.yaml", "spec.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			opts.Spec = name
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "options.json"))
	if errors.Is(err, fs.ErrNotExist) {
		if opts.Spec == "" {
			t.Fatal("case has neither spec.yaml nor spec.json")
		}
		return opts
	}
	if err != nil {
		t.Fatal(err)
	}
	var co caseOptions
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&co); err != nil {
		t.Fatalf("options.json: %v", err)
	}
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&opts.Spec, co.Spec)
	set(&opts.Out, co.Out)
	set(&opts.Package, co.Package)
	set(&opts.Migrations, co.Migrations)
	opts.ClientOut = co.ClientOut
	opts.Dialects = co.Dialects
	opts.Layout = co.Layout
	opts.Docs = co.Docs
	opts.Overlay = co.Overlay
	opts.Store = co.Store
	opts.MigrationVersion = co.MigrationVersion
	opts.MigrationTable = co.MigrationTable
	opts.AcceptBreaking = co.AcceptBreaking
	if opts.Spec == "" {
		t.Fatal("case has neither spec.yaml nor spec.json")
	}
	return opts
}

// readTree reads every file under dir into a map keyed by slash-separated
// path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return files
}

// asText makes file maps print readably in cmp's diff.
func asText(files map[string][]byte) map[string]string {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[k] = string(v)
	}
	return out
}

func diagText(diags []model.Diagnostic) string {
	var b strings.Builder
	for _, d := range diags {
		b.WriteString(d.String() + "\n")
	}
	return b.String()
}

// reportText is what the command prints on stderr for rep: nothing when
// there is nothing to report, else every diagnostic and the summary line.
func reportText(t *testing.T, rep model.Report) string {
	t.Helper()
	if len(rep.Diagnostics) == 0 {
		return ""
	}
	var b strings.Builder
	if err := rep.Write(&b, model.WarningsAll); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(goldenDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		n++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			runGoldenCase(t, dir)
		})
	}
	if n == 0 {
		t.Fatalf("no golden cases in %s", goldenDir)
	}
}

func runGoldenCase(t *testing.T, dir string) {
	opts := readCaseOptions(t, dir)
	ctx := context.Background()
	files, rep, err := Run(ctx, opts)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	diags := rep.Diagnostics
	// Determinism: a second run gives byte-identical output.
	again, diags2, err := Generate(ctx, opts)
	if err != nil {
		t.Fatalf("second Generate: %v", err)
	}
	if diff := cmp.Diff(asText(files), asText(again)); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(diagText(diags), diagText(diags2)); diff != "" {
		t.Errorf("two runs' diagnostics differ (-first +second):\n%s", diff)
	}

	stderrPath := filepath.Join(dir, "stderr.txt")
	wantDir := filepath.Join(dir, "want")
	gotStderr := reportText(t, rep)
	files = comparedFiles(t, dir, files)
	if *update {
		if err := os.RemoveAll(wantDir); err != nil {
			t.Fatal(err)
		}
		if files != nil {
			if err := WriteDir(wantDir, files); err != nil {
				t.Fatal(err)
			}
		}
		if gotStderr != "" {
			if err := os.WriteFile(stderrPath, []byte(gotStderr), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(stderrPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}

	wantStderr, err := os.ReadFile(stderrPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(wantStderr), gotStderr); diff != "" {
		t.Errorf("diagnostics differ from stderr.txt (-want +got):\n%s", diff)
	}
	want := readTree(t, wantDir)
	if model.HasErrors(diags) {
		if len(want) > 0 {
			t.Errorf("case has want/ but generation failed:\n%s", gotStderr)
		}
		if files != nil {
			t.Errorf("Generate returned files despite errors")
		}
		return
	}
	if len(want) == 0 {
		t.Fatalf("case has no want/ directory; run go test ./generator -run TestGolden -update")
	}
	if diff := cmp.Diff(asText(want), asText(files)); diff != "" {
		t.Errorf("generated files differ from want/ (-want +got):\n%s", diff)
	}
}

// comparedFiles is what of files the case in dir compares with its want/:
// every file for a case that tests emission, the lock file alone for one
// that tests the loader.
func comparedFiles(t *testing.T, dir string, files map[string][]byte) map[string][]byte {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, loaderCase))
	if errors.Is(err, fs.ErrNotExist) || files == nil {
		return files
	}
	if err != nil {
		t.Fatal(err)
	}
	lock := make(map[string][]byte)
	for p, b := range files {
		if path.Base(p) == breaking.FileName {
			lock[p] = b
		}
	}
	if len(lock) == 0 {
		t.Fatalf("loader case: the generator wrote no %s", breaking.FileName)
	}
	return lock
}

// TestGoldenCompiles builds every case's expected Go package inside the
// golden tree's own module, which replaces idemgen with this checkout: the
// goldens are not only what the generator writes but code that compiles
// against the runtime.
func TestGoldenCompiles(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the goldens: %v", err)
	}
	pkgs, err := filepath.Glob(filepath.Join(goldenDir, "*", "want", "*", "*.idem.go"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(goldenDir, "*", "want", "*", "*", "*.idem.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs)+len(more) == 0 {
		t.Fatal("no generated Go files under testdata/golden/*/want")
	}
	cmd := exec.Command(gobin, "build", "./...")
	cmd.Dir = goldenDir
	cmd.Env = goEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./... in testdata/golden: %v\n%s", err, out)
	}
	t.Logf("compiled %d golden packages", len(pkgs)+len(more))
}

// goEnv is the environment for a go command run on another module: a
// -modfile meant for this module, or a workspace, must not leak into it.
func goEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			var keep []string
			for _, f := range strings.Fields(v) {
				if !strings.HasPrefix(f, "-modfile") {
					keep = append(keep, f)
				}
			}
			kv = "GOFLAGS=" + strings.Join(keep, " ")
		}
		env = append(env, kv)
	}
	return append(env, "GOWORK=off")
}
