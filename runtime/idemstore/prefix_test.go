package idemstore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every error this package makes names the package, as Go's errors do, so
// that a message in a log says where it came from: "idemstore: ...". An
// error that starts with one of the package's own ("%w: ...") names it
// through that one.
func TestErrorsNameThePackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !(sel.Sel.Name == "New" || sel.Sel.Name == "Errorf") {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "errors" && pkg.Name != "fmt") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			made++
			if msg, _ := strconv.Unquote(lit.Value); !strings.HasPrefix(msg, "idemstore: ") && !strings.HasPrefix(msg, "%w") {
				t.Errorf("%s: error %q does not begin with \"idemstore: \"", fset.Position(lit.Pos()), msg)
			}
			return true
		})
	}
	if made == 0 {
		t.Fatal("found no errors.New or fmt.Errorf in the package")
	}
}
