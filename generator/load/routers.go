package load

import (
	"strings"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// checkServeMuxPaths warns, once for the spec, about protected operations
// whose path has a segment mixing a parameter with literal text
// ("{Sid}.json", "{name}:cancel"). The engine serves them, and chi and
// gorilla/mux route them, but net/http's ServeMux cannot register them: its
// wildcards are whole segments. Which router the service uses is not in
// the spec, so this is a warning that names the ones that work, and
// Engine.ServeMux refuses such a route with the same advice at run time.
func (l *loader) checkServeMuxPaths(ops []model.Operation) {
	var names []string
	var first *model.Operation
	for i, op := range ops {
		t, err := pathtemplate.Parse(op.Path)
		if err != nil || !mixesParamAndText(t) {
			continue
		}
		if first == nil {
			first = &ops[i]
		}
		names = append(names, opLabel(op))
	}
	if first == nil {
		return
	}
	l.report(operationList(names)).warnf(first.Pos, "",
		"the path mixes a parameter with text in one segment, which net/http's ServeMux cannot register (its wildcards are whole segments), so Engine.ServeMux refuses the route; serve these operations through chi (runtime/idemchi) or gorilla/mux, or mount Engine.Middleware in front of the router that serves them")
}

// mixesParamAndText reports whether a segment of t is a parameter with
// literal text beside it.
func mixesParamAndText(t *pathtemplate.Template) bool {
	for _, seg := range strings.Split(t.Shape(), "/") {
		if strings.Contains(seg, "{}") && seg != "{}" {
			return true
		}
	}
	return false
}
