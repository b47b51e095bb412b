package idem

import (
	"fmt"
	"net/url"
	"strings"
)

// template is a parsed OpenAPI path template such as
// "/pets/{pet_id}/adoptions".
type template struct {
	segments []segment
	literals int // how many segments are literal: more literal wins
}

type segment struct {
	literal string
	param   string // set for a "{name}" segment
}

func parseTemplate(path string) (template, error) {
	if !strings.HasPrefix(path, "/") {
		return template{}, fmt.Errorf("path template %q does not start with /", path)
	}
	var t template
	for _, s := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") && len(s) > 2 {
			t.segments = append(t.segments, segment{param: s[1 : len(s)-1]})
			continue
		}
		if strings.ContainsAny(s, "{}") {
			// OpenAPI allows "/files/{name}.json"; the engine matches whole
			// segments only, so refuse rather than silently never match.
			return template{}, fmt.Errorf("path template %q: a parameter must fill a whole segment", path)
		}
		t.segments = append(t.segments, segment{literal: s})
		t.literals++
	}
	return t, nil
}

// match reports whether the escaped request path fits t, and the decoded
// path parameters when it does.
func (t template) match(parts []string) (map[string]string, bool) {
	if len(parts) != len(t.segments) {
		return nil, false
	}
	var params map[string]string
	for i, s := range t.segments {
		if s.param == "" {
			if parts[i] != s.literal {
				return nil, false
			}
			continue
		}
		v, err := url.PathUnescape(parts[i])
		if err != nil || v == "" {
			return nil, false
		}
		if params == nil {
			params = make(map[string]string, len(t.segments)-t.literals)
		}
		params[s.param] = v
	}
	return params, true
}

// router finds the operation of a request by method and path template, the
// way OpenAPI resolves paths: a literal segment beats a parameter.
type router struct {
	basePath string
	// byMethod holds the operations of one method, most literal first.
	byMethod map[string][]*operation
}

func (rt *router) find(method, escapedPath string) (*operation, map[string]string) {
	ops := rt.byMethod[method]
	if len(ops) == 0 {
		return nil, nil
	}
	p, ok := strings.CutPrefix(escapedPath, rt.basePath)
	if !ok || !strings.HasPrefix(p, "/") {
		return nil, nil
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for _, op := range ops {
		if params, ok := op.template.match(parts); ok {
			return op, params
		}
	}
	return nil, nil
}
