// Package logscan reads the log lines a package can emit from its source,
// so that tests can hold each one to the page that documents it.
package logscan

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// Line is one log call: its level (WARN or ERROR) and its constant
// message.
type Line struct {
	Level, Msg string
}

// levels maps the log/slog methods that log at WARN and ERROR to their
// level and the index of their message argument.
var levels = map[string]struct {
	level string
	arg   int
}{
	"Warn": {"WARN", 0}, "WarnContext": {"WARN", 1},
	"Error": {"ERROR", 0}, "ErrorContext": {"ERROR", 1},
}

// WarnAndError returns the WARN and ERROR calls with a constant message
// (a string literal or a sum of them) in dir's non-test Go files.
func WarnAndError(dir string) ([]Line, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("logscan: %w", err)
	}
	var out []Line
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, fmt.Errorf("logscan: %w", err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if l, ok := logCall(n); ok {
				out = append(out, l)
			}
			return true
		})
	}
	return out, nil
}

// logCall is n as a WARN or ERROR call with a constant message.
func logCall(n ast.Node) (Line, bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok {
		return Line{}, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return Line{}, false
	}
	at, ok := levels[sel.Sel.Name]
	if !ok || len(call.Args) <= at.arg {
		return Line{}, false
	}
	msg, ok := constString(call.Args[at.arg])
	return Line{Level: at.level, Msg: msg}, ok
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
