package load

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// fuzzVars reads variables written one a line, the name, a tab, then the
// values separated by tabs, the default first.
func fuzzVars(s string) map[string][]string {
	vars := map[string][]string{}
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		var values []string
		for _, v := range f[1:] {
			if !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
		vars[f[0]] = values
	}
	return vars
}

// substitute puts values in the template's {variable} references, all in
// one pass, as a client that picks them does.
func substitute(t *testing.T, tmpl string, values map[string]string) string {
	t.Helper()
	parts, ok := splitTemplate(tmpl)
	if !ok {
		t.Fatalf("%q: a template serverURLPath took has a stray brace", tmpl)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.ref {
			b.WriteString(values[p.text])
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// netURLPath is the prefix net/url reads from a concrete server URL, "/"
// for none.
func netURLPath(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p == "" {
		p = "/"
	}
	return p, true
}

// FuzzServerPath holds serverURLPath to net/url: for a template it takes,
// the URL with every variable at its default parses, and its path is the
// base path; so is the path of every other choice of values that parses,
// since the prefix it returns is to be the only one the servers use.
func FuzzServerPath(f *testing.F) {
	for _, seed := range []struct{ tmpl, vars string }{
		{"https://api.example.com/v1", ""},
		{"https://api.example.com/{version}", "version\tv1\tv2"},
		{"{scheme}://api.example.com/{version}", "scheme\thttps\thttp\nversion\tv1\tv2"},
		{"{scheme}://{host}", "scheme\thttps\thttp\nhost\tapi.example.com"},
		{"{scheme}://{host}/{version}", "scheme\thttps\thttp\nhost\tapi.example.com\nversion\tv3"},
		{"https://{region}.example.com/{version}", "region\teu\tus\nversion\tv3"},
		{"{protocol}://{host}{basePath}", "protocol\thttps\nhost\th\nbasePath\t/v1\t/v2"},
		{"https://api.example.com{basePath}", "basePath\t/v1"},
		{"{server}", "server\thttps://api.example.com/v1"},
		{"https://api.example.com/v1/../v2", ""},
		{"https://api.example.com/./v2", ""},
		{"https://api.example.com/%2e%2E/v2", ""},
		{"https://api.example.com//v1", ""},
		{"///v1", ""},
		{"https:///v1", ""},
		{"https:{x}//h/v1", "x\ty\t"},
		{"https://{host}/v1", "host\tapi.example.com\tlocalhost:8080\t\tu@h:1"},
		{"//{host}/v1", "host\th\t"},
		{"{s}://{host}/v1", "s\thttps\thttp\nhost\th:1\t"},
		{"https:v1", ""},
		{"/api/v2", ""},
		{"api", ""},
		{"//{h}/v1?x={q}#{f}", "h\ta\tb\nq\t1\t/2\nf\t#\t?"},
		{"https://h/{v}", ""},
		{"https://h/{v", ""},
		{"https://h/v}", ""},
		{"https://h/a%zz", ""},
		{"https://h/caf%C3%A9/a b", ""},
		{"{a}{b}", "a\thttps:\thttp:\nb\t//h/v1"},
	} {
		f.Add(seed.tmpl, seed.vars)
	}
	f.Fuzz(func(t *testing.T, tmpl, varsText string) {
		vars := fuzzVars(varsText)
		got, err := serverURLPath(tmpl, vars)
		if err != nil {
			return
		}
		defaults := map[string]string{}
		combos := 1
		for name, values := range vars {
			if len(values) == 0 {
				continue // not named by the template, or it would have been refused
			}
			defaults[name] = values[0]
			combos *= len(values)
		}
		raw := substitute(t, tmpl, defaults)
		want, ok := netURLPath(raw)
		if !ok {
			t.Fatalf("%q with %q: base path %q, but net/url does not parse %q", tmpl, varsText, got, raw)
		}
		if got != want {
			t.Fatalf("%q with %q: base path %q, net/url reads %q from %q", tmpl, varsText, got, want, raw)
		}
		if combos > 512 {
			return
		}
		// Every other choice of values the URL can be served at.
		var names []string
		for name := range defaults {
			names = append(names, name)
		}
		choice := map[string]string{}
		var each func(i int)
		each = func(i int) {
			if i == len(names) {
				raw := substitute(t, tmpl, choice)
				if p, ok := netURLPath(raw); ok && p != got {
					t.Fatalf("%q with %q: base path %q, but the URL %q it may be served at puts %q before the paths", tmpl, varsText, got, raw, p)
				}
				return
			}
			for _, v := range vars[names[i]] {
				choice[names[i]] = v
				each(i + 1)
			}
		}
		each(0)
	})
}
