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
// replaced by their defaults. A URL whose prefix before the paths is not
// one (a variable with several values in its path, a variable not
// declared, a dot or empty segment, a URL relative to where the spec is
// served) is reported.
func (l *loader) serverPath(s *yaml.Node) (serverPath, bool) {
	s = deref(s)
	_, u := get(s, "url")
	if u == nil || u.Kind != yaml.ScalarNode {
		return serverPath{path: "/", pos: l.t.pos(s)}, true
	}
	pos := l.t.pos(u)
	_, vars := get(s, "variables")
	p, err := serverURLPath(u.Value, serverVariables(vars))
	if err != nil {
		l.report("").errorf(pos, "", "the server URL %s %v; %s", u.Value, err, setBasePath)
		return serverPath{}, false
	}
	return serverPath{path: p, pos: pos}, true
}

// serverVariables reads a Server Object's variables: each name's values,
// its default first, then the other values of its enum. A variable
// without a default has none.
func serverVariables(vars *yaml.Node) map[string][]string {
	out := map[string][]string{}
	for _, v := range pairs(vars) {
		var values []string
		if _, def := get(v.val, "default"); def != nil && def.Kind == yaml.ScalarNode {
			values = append(values, def.Value)
			if _, enum := get(v.val, "enum"); enum != nil && enum.Kind == yaml.SequenceNode {
				for _, e := range enum.Content {
					if e = deref(e); e != nil && e.Kind == yaml.ScalarNode && !slices.Contains(values, e.Value) {
						values = append(values, e.Value)
					}
				}
			}
		}
		out[v.key.Value] = values
	}
	return out
}

// templatePart is a piece of a server URL template: literal text, or a
// {variable} reference (ref set, text its name).
type templatePart struct {
	text string
	ref  bool
}

// splitTemplate splits a server URL template into its literal text and its
// {variable} references. ok is false when a brace opens or closes none.
func splitTemplate(tmpl string) (parts []templatePart, ok bool) {
	for tmpl != "" {
		open := strings.IndexAny(tmpl, "{}")
		if open < 0 {
			return append(parts, templatePart{text: tmpl}), true
		}
		if tmpl[open] == '}' {
			return nil, false
		}
		end := strings.IndexAny(tmpl[open+1:], "{}")
		if end < 0 || tmpl[open+1+end] == '{' {
			return nil, false
		}
		if open > 0 {
			parts = append(parts, templatePart{text: tmpl[:open]})
		}
		parts = append(parts, templatePart{text: tmpl[open+1 : open+1+end], ref: true})
		tmpl = tmpl[open+2+end:]
	}
	return parts, true
}

// serverURLPath is the path a server URL template puts before every path,
// "/" for none, with each variable at its default. vars holds each
// declared variable's values, its default first.
//
// Where the path starts and ends is read on the template, as RFC 3986
// splits a URI (and net/url reads it): a variable of one value is text
// like the rest, and one of several values stands for any of them. Such a
// variable in the path, or one in the scheme or host with a value that
// could move where the path starts (empty, or holding : / ? #), leaves
// the prefix open. Only then are the defaults put in.
func serverURLPath(tmpl string, vars map[string][]string) (string, error) {
	parts, ok := splitTemplate(tmpl)
	if !ok {
		return "", fmt.Errorf("has a brace that opens or closes no {variable}, so the prefix before the paths is unknown")
	}
	// skeleton is the template with each variable of one value replaced by
	// it, and each of several values by one letter at a recorded offset.
	type several struct {
		name   string
		values []string
		at     int
	}
	var skeleton, concrete strings.Builder
	var open []several
	for _, p := range parts {
		if !p.ref {
			skeleton.WriteString(p.text)
			concrete.WriteString(p.text)
			continue
		}
		values, declared := vars[p.text]
		switch {
		case !declared:
			return "", fmt.Errorf("names the variable %s, which its variables do not declare (declare it, with a default), so the prefix before the paths is unknown", p.text)
		case len(values) == 0:
			return "", fmt.Errorf("has the variable %s without a default (give it one), so the prefix before the paths is unknown", p.text)
		case len(values) == 1:
			skeleton.WriteString(values[0])
		default:
			open = append(open, several{name: p.text, values: values, at: skeleton.Len()})
			skeleton.WriteByte('x')
		}
		concrete.WriteString(values[0])
	}
	sk := skeleton.String()
	at := splitURI(sk)
	for _, v := range open {
		switch {
		case v.at >= at.pathEnd: // in the query or the fragment
		case v.at >= at.pathStart:
			return "", fmt.Errorf("has the variable %s in its path, with %d values, so the prefix before the paths is not one", v.name, len(v.values))
		case slices.ContainsFunc(v.values, func(value string) bool { return movesPath(value, at, v.at) }):
			return "", fmt.Errorf("has the variable %s, with %d values, one of them empty or holding one of : / ? # (a port's : only after //), so where its path starts, and the prefix before the paths, is not one", v.name, len(v.values))
		}
	}
	if _, err := url.Parse(concrete.String()); err != nil {
		return "", fmt.Errorf("is not a URL (%w), so the prefix before the paths is unknown", err)
	}
	raw := sk[at.pathStart:at.pathEnd] // no variable of several values lies in it
	if !at.scheme && !at.authority && raw != "" && !strings.HasPrefix(raw, "/") {
		return "", fmt.Errorf("is relative to wherever the spec is served, so the prefix before the paths is unknown")
	}
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("is not a URL (%w), so the prefix before the paths is unknown", err)
	}
	p := (&url.URL{Path: unescaped, RawPath: raw}).EscapedPath()
	if p == "" || p == "/" {
		return "/", nil
	}
	segments := strings.Split(p[1:], "/")
	for i, seg := range segments {
		seg, _ = url.PathUnescape(seg)
		if seg == "." || seg == ".." || seg == "" && i < len(segments)-1 {
			return "", fmt.Errorf("has the path %s, with an empty, . or .. segment, which one client resolves away (RFC 3986 section 5.2.4) and another sends as written, so the prefix before the paths is not one", p)
		}
	}
	return strings.TrimSuffix(p, "/"), nil
}

// movesPath reports whether a variable's value, put at offset at of a
// server URL split as u, before its path, could move where the path
// starts. In the authority only a / ? or # ends it (a : is a port's), and
// an empty value only where no scheme comes first (//{host}/v1 with host
// empty reads as the path ///v1); in the scheme a : / ? # or an empty
// value moves it.
func movesPath(value string, u uriParts, at int) bool {
	if u.authority && at >= u.authorityStart {
		return strings.ContainsAny(value, "/?#") || value == "" && !u.scheme
	}
	return value == "" || strings.ContainsAny(value, ":/?#")
}

// uriParts is where a URI's path starts and ends, whether it has a scheme
// and an authority, and where the authority starts.
type uriParts struct {
	pathStart, pathEnd int
	scheme, authority  bool
	authorityStart     int
}

// splitURI finds the path of a URI reference as RFC 3986 section 3 splits
// it, reading it as net/url does where the two differ: a scheme followed
// by no "/" leaves an opaque rest with no path, and a reference of no
// scheme that starts with "///" is all path.
func splitURI(s string) uriParts {
	end := len(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		end = i
	}
	var at uriParts
	rest := 0
scheme:
	for i := 0; i < end; i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.':
			if i == 0 {
				break scheme
			}
		case c == ':':
			if i > 0 {
				at.scheme, rest = true, i+1
			}
			break scheme
		default:
			break scheme
		}
	}
	r := s[rest:end]
	switch {
	case at.scheme && !strings.HasPrefix(r, "/"):
		return uriParts{pathStart: end, pathEnd: end, scheme: true}
	case strings.HasPrefix(r, "//") && (at.scheme || !strings.HasPrefix(r, "///")):
		at.authority = true
		rest += 2
		at.authorityStart = rest
		if i := strings.IndexByte(s[rest:end], '/'); i >= 0 {
			rest += i
		} else {
			rest = end
		}
	}
	at.pathStart, at.pathEnd = rest, end
	return at
}
