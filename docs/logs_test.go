package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every WARN and ERROR line the engine logs is one an operator should act
// on, so each is listed in docs/runtime.md ("What the engine logs") with
// what to do about it. The test reads the messages from the engine's
// source, so a new log line without its entry fails here.
func TestEveryEngineWarningIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runtime.md"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := engineLogMessages(t, filepath.Join(root, "runtime", "idem"))
	if len(msgs) < 10 {
		t.Fatalf("found %d WARN and ERROR messages in the engine; the parser is missing them", len(msgs))
	}
	page := strings.Join(strings.Fields(string(doc)), " ")
	for _, m := range msgs {
		if !strings.Contains(page, m) {
			t.Errorf("docs/runtime.md does not list the engine's log line %q", m)
		}
	}
}

// engineLogMessages returns the constant messages of the WARN and ERROR
// calls in dir's non-test Go files.
func engineLogMessages(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			at := map[string]int{"Warn": 0, "Error": 0, "WarnContext": 1, "ErrorContext": 1}
			i, ok := at[sel.Sel.Name]
			if !ok || len(call.Args) <= i {
				return true
			}
			if s, ok := constString(call.Args[i]); ok {
				out = append(out, s)
			}
			return true
		})
	}
	return out
}

// constString folds a string literal or a sum of them.
func constString(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		a, ok1 := constString(e.X)
		b, ok2 := constString(e.Y)
		return a + b, ok1 && ok2 && e.Op == token.ADD
	}
	return "", false
}
