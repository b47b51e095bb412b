package work

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's command for the work tests names every package that has
// one, and nothing else: a work test left out of it would run in CI (which
// finds them by their tag) but never on a developer's machine.
func TestReadmeRunsEveryWorkTest(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\s*go test -tags idemwork (.+)$`).FindSubmatch(readme)
	if line == nil {
		t.Fatal("README.md has no `go test -tags idemwork` command")
	}
	named := strings.Fields(string(line[1]))
	slices.Sort(named)

	var tagged []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(string(src), "//go:build idemwork\n") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if pkg := "./" + filepath.ToSlash(rel); !slices.Contains(tagged, pkg) {
				tagged = append(tagged, pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tagged)
	if len(tagged) == 0 {
		t.Fatal("found no test file built with the idemwork tag")
	}
	if !slices.Equal(named, tagged) {
		t.Errorf("README.md runs the work tests of\n  %v\nthe packages that have them are\n  %v", named, tagged)
	}
}

// isModule reports whether dir is the root of a module of its own, whose
// tests the module's go test does not reach.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}
