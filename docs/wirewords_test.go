package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemstore"
	"github.com/idemgen/idemgen/runtime/key"
	"github.com/idemgen/idemgen/runtime/problem"
)

// wireWords are the words a client or a store reads on the wire, each
// defined once: the problem type names, their default base and the replay
// header in runtime/problem, the states of a stored key in runtime/idemstore, the
// places of a key in runtime/key.
func wireWords() (prose, states, places []string) {
	for _, a := range problem.Answers() {
		if !slices.Contains(prose, a.Name()) {
			prose = append(prose, a.Name())
		}
	}
	prose = append(prose, problem.ReplayedHeader, problem.DefaultBase)
	for _, s := range idemstore.States() {
		states = append(states, string(s))
	}
	places = []string{string(key.InHeader), string(key.InBody), string(key.InQuery)}
	return prose, states, places
}

// homes are the files that define the words.
var homes = map[string]bool{
	"runtime/problem/problem.go": true,
	"runtime/idemstore/store.go": true,
	"runtime/key/in.go":          true,
	"templates/docs/api.md.tmpl": false, // rendered from runtime/problem: no home
}

// TestWireWordsHaveOneSource: outside the file that defines it, no Go
// source of the module spells a problem name or the replay header in a
// string, compares a key's state or declares a key place as a literal, and
// the docs template renders them from runtime/problem. Tests, generated
// files and the SQL a store runs are not checked.
func TestWireWordsHaveOneSource(t *testing.T) {
	prose, states, places := wireWords()
	word := func(w string) *regexp.Regexp {
		return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(w) + `($|[^\w-])`)
	}
	var proseRe []*regexp.Regexp
	for _, w := range prose {
		proseRe = append(proseRe, word(w))
	}
	spelled := func(where, text string) {
		for i, re := range proseRe {
			if re.MatchString(text) {
				t.Errorf("%s spells %q: use the constant of runtime/problem", where, prose[i])
			}
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(root, "templates", "docs", "api.md.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	spelled("templates/docs/api.md.tmpl", string(tmpl))
	for _, file := range moduleSources(t) {
		rel := filepath.ToSlash(strings.TrimPrefix(file, root+string(filepath.Separator)))
		if homes[rel] {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					spelled(fset.Position(n.Pos()).String(), n.Value)
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					for _, side := range []ast.Expr{n.X, n.Y} {
						if s, ok := literal(side); ok && slices.Contains(states, s) {
							t.Errorf("%s compares a key's state with %q: use the idemstore.State constant", fset.Position(n.Pos()), s)
						}
					}
				}
			case *ast.GenDecl:
				if n.Tok != token.CONST {
					return true
				}
				for _, spec := range n.Specs {
					for _, v := range spec.(*ast.ValueSpec).Values {
						if s, ok := literal(v); ok && slices.Contains(places, s) {
							t.Errorf("%s declares the key place %q: use runtime/key's In", fset.Position(v.Pos()), s)
						}
					}
				}
			}
			return true
		})
	}
}

// literal is the value of a string literal expression.
func literal(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// moduleSources lists the module's Go files that are not tests, leaving
// out testdata, the nested modules and the example (whose service answers
// with problems of its own, and whose hand-written baseline stands apart
// from the runtime).
func moduleSources(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "examples" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
