package load

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
)

var update = flag.Bool("update", false, "rewrite the stderr.txt of the failing golden cases")

// TestGoldenFailures loads every testdata/golden/fail-* spec, except the
// fail-emit-* ones, and compares what the command would print (the
// diagnostics and the summary line) with the case's stderr.txt.
func TestGoldenFailures(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "golden", "fail-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no testdata/golden/fail-* cases")
	}
	for _, dir := range dirs {
		if strings.HasPrefix(filepath.Base(dir), "fail-emit-") {
			// Refused by the Go emitter's name check (gocode.CheckNames),
			// which the loader does not run.
			continue
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			name := "spec.yaml"
			if _, err := os.Stat(filepath.Join(dir, "spec.json")); err == nil {
				name = "spec.json"
			}
			rep := model.Report{Source: name}
			spec, diags, err := Load(context.Background(), filepath.Join(dir, name), Options{DisplayName: name, Operations: &rep.Operations})
			if err != nil {
				t.Fatal(err)
			}
			if spec != nil {
				t.Error("a failing case returned a spec")
			}
			rep.Diagnostics = diags
			var b strings.Builder
			if err := rep.Write(&b, model.WarningsAll); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			golden := filepath.Join(dir, "stderr.txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("diagnostics (-want +got):\n%s", diff)
			}
		})
	}
}
