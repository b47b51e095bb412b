package idem_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// doc.go names the package's files, those of a request's life in the order
// one request first reaches them. The walk that holds it to that follows
// every call from Engine.Middleware into a function of the package, depth
// first and in the order the calls stand in the code, each function once;
// a test that fails here says which list to change.
func TestDocNamesTheFilesInTheOrderARequestReachesThem(t *testing.T) {
	pkg := parsePackage(t)
	life, all := docFiles(t, pkg)
	var sources []string
	for name := range pkg.files {
		if name != "doc.go" {
			sources = append(sources, name)
		}
	}
	slices.Sort(sources)
	if missing := difference(sources, all); len(missing) > 0 {
		t.Errorf("doc.go names none of %v; say where each belongs", missing)
	}
	if extra := difference(all, sources); len(extra) > 0 {
		t.Errorf("doc.go names %v, which the package does not have", extra)
	}
	w := pkg.walkFrom(t, "Engine", "Middleware")
	t.Logf("one request reaches %d files and returns %d times to a file it had left", len(w.order), w.returns)
	if !slices.Equal(life, w.order) {
		t.Errorf("doc.go's request's life names\n\t%v\none request reaches\n\t%v", life, w.order)
	}
}

// docFiles are the files doc.go names: in its section on a request's life,
// in the order first named there, and in the whole comment.
func docFiles(t *testing.T, pkg *sourcePackage) (life, all []string) {
	doc := pkg.files["doc.go"].Doc.Text()
	start := strings.Index(doc, "# A request's life")
	if start < 0 {
		t.Fatal("doc.go has no section on a request's life")
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n# "); end >= 0 {
		section = section[:end]
	}
	fileName := regexp.MustCompile(`\b[a-z0-9_]+\.go\b`)
	for _, name := range fileName.FindAllString(section, -1) {
		if !slices.Contains(life, name) {
			life = append(life, name)
		}
	}
	for _, name := range fileName.FindAllString(doc, -1) {
		if !slices.Contains(all, name) {
			all = append(all, name)
		}
	}
	slices.Sort(all)
	return life, all
}

// difference is what of a is not in b.
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// sourcePackage is the package's non-test files, type-checked alone: the
// calls between its own functions resolve, what they call elsewhere does
// not, and need not.
type sourcePackage struct {
	fset  *token.FileSet
	files map[string]*ast.File
	pkg   *types.Package
	info  *types.Info
	decls map[types.Object]*ast.FuncDecl
}

type noImports struct{}

func (noImports) Import(string) (*types.Package, error) {
	return nil, errors.New("imports are not loaded")
}

func parsePackage(t *testing.T) *sourcePackage {
	t.Helper()
	p := &sourcePackage{
		fset:  token.NewFileSet(),
		files: map[string]*ast.File{},
		info:  &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}},
		decls: map[types.Object]*ast.FuncDecl{},
	}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(p.fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		p.files[name] = f
		files = append(files, f)
	}
	conf := types.Config{Importer: noImports{}, Error: func(error) {}}
	p.pkg, _ = conf.Check("idem", p.fset, files, p.info)
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				p.decls[p.info.Defs[fd.Name]] = fd
			}
		}
	}
	return p
}

// walk is the files one request reaches: in the order first reached, and
// how often it came back to one it had left.
type walk struct {
	p       *sourcePackage
	seen    map[*ast.FuncDecl]bool
	order   []string
	at      string
	returns int
}

func (p *sourcePackage) walkFrom(t *testing.T, typ, method string) *walk {
	t.Helper()
	recv := p.pkg.Scope().Lookup(typ)
	if recv == nil {
		t.Fatalf("no type %s", typ)
	}
	m, _, _ := types.LookupFieldOrMethod(types.NewPointer(recv.Type()), true, p.pkg, method)
	if p.decls[m] == nil {
		t.Fatalf("no method %s.%s", typ, method)
	}
	w := &walk{p: p, seen: map[*ast.FuncDecl]bool{}}
	w.function(p.decls[m])
	return w
}

func (w *walk) function(d *ast.FuncDecl) {
	w.seen[d] = true
	file := filepath.Base(w.p.fset.Position(d.Pos()).Filename)
	w.reach(file)
	ast.Inspect(d.Body, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		if callee := w.p.decls[w.p.info.Uses[id]]; callee != nil && !w.seen[callee] {
			w.function(callee)
			w.reach(file)
		}
		return true
	})
}

// reach notes that the walk is in file.
func (w *walk) reach(file string) {
	switch {
	case file == w.at:
		return
	case slices.Contains(w.order, file):
		w.returns++
	default:
		w.order = append(w.order, file)
	}
	w.at = file
}
