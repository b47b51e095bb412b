package load

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/model"
)

// serverPath is the path one server URL puts before every path, with
// where the server is written.
type serverPath struct {
	path string // "/v71"; "/" for none
	pos  model.Pos
}

// basePath works out the prefix the servers of the protected operations
// put before their paths, which the engine must strip before it matches a
// request against a path template: a request to /v71/payments is the
// operation /payments of a spec served at https://host/v71. Options.BasePath,
// when set, is taken instead. The servers must agree on one prefix; when
// they do not (two servers with other paths, a path variable with several
// values, a relative URL), the engine cannot tell which prefix is the
// mount, and the spec is refused until the configuration names one. It
// returns "" for a spec served at the root.
func (l *loader) basePath(ops []model.Operation) string {
	if b := l.opts.BasePath; b != "" {
		return strings.TrimSuffix(b, "/")
	}
	var found []serverPath
	for _, list := range l.serverLists(ops) {
		for _, s := range list.Content {
			sp, ok := l.serverPath(s)
			if !ok {
				return ""
			}
			if !slices.ContainsFunc(found, func(f serverPath) bool { return f.path == sp.path }) {
				found = append(found, sp)
			}
		}
	}
	switch len(found) {
	case 0:
		return ""
	case 1:
		return strings.TrimSuffix(found[0].path, "/")
	}
	var paths []string
	for _, f := range found {
		paths = append(paths, fmt.Sprintf("%s (line %d)", f.path, f.pos.Line))
	}
	l.report("").errorf(found[1].pos, "", "the servers put %s before the paths, and the engine strips one prefix before it matches a request to its operation; %s",
		strings.Join(paths, " and "), setBasePath)
	return ""
}

// setBasePath says how to settle a base path the servers leave open.
const setBasePath = `set basePath in idemgen.yaml (or --base-path) to the prefix this service is served under, "/" for none`

// serverLists returns the servers lists that apply to the protected
// operations: each one's own, else its path item's, else the document's.
func (l *loader) serverLists(ops []model.Operation) []*yaml.Node {
	_, doc := get(l.t.root, "servers")
	var out []*yaml.Node
	add := func(n *yaml.Node) {
		if n = deref(n); n != nil && n.Kind == yaml.SequenceNode && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, op := range ops {
		item := l.pathItemNode(op.Path)
		_, opNode := get(item, strings.ToLower(op.Method))
		_, own := get(opNode, "servers")
		_, itemServers := get(item, "servers")
		switch {
		case own != nil:
			add(own)
		case itemServers != nil:
			add(itemServers)
		default:
			add(doc)
		}
	}
	return out
}

// serverPath reads the path of one Server Object's url, its variables
// replaced by their defaults. A variable in the path with several values
// in its enum, or a URL relative to where the spec is served, leaves the
// prefix open and is reported.
func (l *loader) serverPath(s *yaml.Node) (serverPath, bool) {
	s = deref(s)
	_, u := get(s, "url")
	if u == nil || u.Kind != yaml.ScalarNode {
		return serverPath{path: "/", pos: l.t.pos(s)}, true
	}
	pos := l.t.pos(u)
	raw := u.Value
	pathStart := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		pathStart = len(raw)
		if j := strings.IndexByte(raw[i+3:], '/'); j >= 0 {
			pathStart = i + 3 + j
		}
	}
	_, vars := get(s, "variables")
	for _, v := range pairs(vars) {
		name := "{" + v.key.Value + "}"
		if !strings.Contains(raw, name) {
			continue
		}
		_, def := get(deref(v.val), "default")
		_, enum := get(deref(v.val), "enum")
		if strings.Contains(raw[pathStart:], name) && enum != nil && len(enum.Content) > 1 {
			l.report("").errorf(pos, "", "the server URL %s has the variable %s in its path, with %d values, so the prefix before the paths is not one; %s",
				raw, v.key.Value, len(enum.Content), setBasePath)
			return serverPath{}, false
		}
		if def != nil {
			raw = strings.ReplaceAll(raw, name, def.Value)
		}
	}
	parsed, err := url.Parse(raw)
	if err != nil {
		l.report("").errorf(pos, "", "the server URL %s is not a URL (%v), so the prefix before the paths is unknown; %s", u.Value, err, setBasePath)
		return serverPath{}, false
	}
	p := parsed.EscapedPath()
	if parsed.Scheme == "" && parsed.Host == "" && p != "" && !strings.HasPrefix(p, "/") {
		l.report("").errorf(pos, "", "the server URL %s is relative to wherever the spec is served, so the prefix before the paths is unknown; %s", u.Value, setBasePath)
		return serverPath{}, false
	}
	if p = strings.TrimSuffix(p, "/"); p == "" {
		p = "/"
	}
	return serverPath{path: p, pos: pos}, true
}
