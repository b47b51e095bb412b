package load

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
	yaml "go.yaml.in/yaml/v4"
)

// unprotected returns the operations of the spec without a policy that
// the engine must know, so that their requests are not taken for a
// protected operation's: those whose path a protected template of the
// same method also matches, and which are more specific than it. A router
// (ServeMux, chi) sends POST /pay/batch to its own handler although POST
// /pay/{id} matches it too; the engine, knowing only /pay/{id}, would
// apply that policy to every batch request (a keyless one refused, a
// second one under the same key answered with the first one's replay).
// An operation without a policy that shares paths with a protected one
// and neither is more specific is refused, naming both: which of them a
// request reaches is the router's accident, and the engine refuses to
// start with such a pair.
func (l *loader) unprotected(ops []model.Operation) []model.Route {
	protected := make(map[string]bool, len(ops))
	tmpls := make([]*pathtemplate.Template, len(ops))
	for i, op := range ops {
		protected[op.Method+" "+op.Path] = true
		tmpls[i], _ = pathtemplate.Parse(op.Path)
	}
	var out []model.Route
	_, paths := get(l.t.root, "paths")
	for _, p := range pairs(paths) {
		path := p.key.Value
		t, err := pathtemplate.Parse(path)
		if err != nil {
			continue // no router serves it; the protected ones are checked elsewhere
		}
		at, ok := l.items[path]
		if !ok {
			continue // it cannot be read, which is reported
		}
		item := at.node
		for _, m := range methods {
			method := strings.ToUpper(m)
			_, opNode := get(item, m)
			if opNode == nil || protected[method+" "+path] {
				continue
			}
			r := model.Route{Method: method, Path: path}
			if _, id := get(deref(opNode), "operationId"); id != nil && id.Kind == yaml.ScalarNode {
				r.ID = id.Value
			}
			if l.shadowedBy(r, t, ops, tmpls) {
				out = append(out, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b model.Route) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}

// shadowedBy reports whether a protected template of r's method matches
// paths of r's and is less specific than r, and reports a protected one
// that shares paths with r with neither more specific.
func (l *loader) shadowedBy(r model.Route, t *pathtemplate.Template, ops []model.Operation, tmpls []*pathtemplate.Template) bool {
	shadowed := false
	for i, op := range ops {
		if op.Method != r.Method || tmpls[i] == nil || !pathtemplate.Shared(t, tmpls[i]) {
			continue
		}
		switch {
		case pathtemplate.Overlap(t, tmpls[i]):
			l.report(opLabel(op)).errorf(op.Pos, "", "its path matches the same requests as %s, which has no policy, and neither is more specific: a router may send such a request to either, and the engine would apply this policy to both; make one path's literal text differ",
				routeLabel(r))
		case pathtemplate.Less(t, tmpls[i]):
			shadowed = true
		}
	}
	return shadowed
}

// routeLabel names an operation without a policy as opLabel names one
// with a policy.
func routeLabel(r model.Route) string {
	if r.ID == "" {
		return r.Method + " " + r.Path
	}
	return fmt.Sprintf("%s %s (%s)", r.Method, r.Path, r.ID)
}
