package pathtemplate

import (
	"errors"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{"pets", "does not start with /"},
		{"/responses?beta=true", "query string"},
		{"/a#frag", "query string"},
		{"/pets/{id", "never closed"},
		{"/pets/id}", "no matching {"},
		{"/pets/{}", "no name"},
		{"/pets/{a{b}}", "nested"},
		{"/pets/{id}/toys/{id}", "appears twice"},
		{"/range/{a}{b}", "touch"},
		{"/files/%zz", "percent-encoded"},
	} {
		_, err := Parse(tc.tmpl)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want a SyntaxError saying %q", tc.tmpl, err, tc.want)
		}
	}
}

func TestSyntaxErrorOffset(t *testing.T) {
	_, err := Parse("/pets/{id}/toys/{id}")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Offset != 16 {
		t.Fatalf("offset of the repeated parameter: got %+v, want 16", se)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		tmpl, path string
		want       map[string]string // nil: no match
	}{
		{"/pets/{id}/adoptions", "/pets/A/adoptions", map[string]string{"id": "A"}},
		{"/pets/{id}/adoptions", "/pets/a%2Fb/adoptions", map[string]string{"id": "a/b"}},
		{"/pets/{id}/adoptions", "/pets//adoptions", nil},
		{"/pets/{id}/adoptions", "/pets/A/adoptions/", nil},
		{"/accounts", "/%61ccounts", map[string]string{}},
		{"/accounts", "/accounts/", nil},
		{"/Accounts/{Sid}.json", "/Accounts/AC1.json", map[string]string{"Sid": "AC1"}},
		{"/Accounts/{Sid}.json", "/Accounts/AC1.json.json", nil},
		{"/Accounts/{Sid}.json", "/Accounts/a.b.json", nil},
		{"/Accounts/{Sid}.json", "/Accounts/a%2Eb.json", map[string]string{"Sid": "a.b"}},
		{"/Accounts/{Sid}.json", "/Accounts/.json", map[string]string{"Sid": ""}},
		{"/Accounts/{Sid}.json", "/Accounts/AC1.xml", nil},
		{"/v1/{name}:cancel", "/v1/op%3A1:cancel", map[string]string{"name": "op:1"}},
		{"/range/{a}-{b}", "/range/x-y-z", map[string]string{"a": "x", "b": "y-z"}},
		// A parameter may be empty in a mixed segment, except where it
		// ends the path: chi serves "/range/x-" and "/files/v" with a
		// route of a whole parameter instead.
		{"/range/{a}-{b}", "/range/x-", nil},
		{"/range/{a}-{b}/n", "/range/x-/n", map[string]string{"a": "x", "b": ""}},
		{"/files/v{version}", "/files/v", nil},
		{"/files/v{version}", "/files/v1", map[string]string{"version": "1"}},
		{"/files/v{version}/", "/files/v/", map[string]string{"version": ""}},
		{"/range/{a}-{b}", "/range/-y", map[string]string{"a": "", "b": "y"}},
		{"/range/{a}-{b}", "/range/xy", nil},
		{"/café/{id}", "/caf%C3%A9/1", map[string]string{"id": "1"}},
		{"/caf%C3%A9/{id}", "/café/1", map[string]string{"id": "1"}},
		{"/v{version}/items", "/v2/items", map[string]string{"version": "2"}},
	} {
		tm, err := Parse(tc.tmpl)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.tmpl, err)
		}
		segs, _ := Split(tc.path)
		got, ok := tm.Match(segs)
		if ok != (tc.want != nil) || (ok && !maps.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0)) {
			t.Errorf("%s on %s = %v, %v; want %v", tc.tmpl, tc.path, got, ok, tc.want)
		}
	}
}

func TestMatchSuffix(t *testing.T) {
	tm, _ := Parse("/pets/{id}/adoptions")
	segs, _ := Split("/v1/pets/A/adoptions")
	if got, ok := tm.MatchSuffix(segs); !ok || got["id"] != "A" {
		t.Fatalf("MatchSuffix = %v, %v", got, ok)
	}
	if _, ok := tm.Match(segs); ok {
		t.Fatal("Match must not ignore a prefix")
	}
}

func TestOverlapAndLess(t *testing.T) {
	for _, tc := range []struct {
		a, b    string
		overlap bool
	}{
		{"/pets/{id}", "/pets/{name}", true},
		{"/pets/{id}", "/pets/mine", false}, // the literal wins
		{"/{a}/b", "/a/{b}", true},          // neither is more specific
		{"/files/{n}.json", "/files/{n}.xml", false},
		{"/files/{n}.json", "/files/{n}", false},
		{"/files/{n}.json", "/files/{a}-{b}", true},
		{"/files/a.json", "/files/{n}.json", false},
		{"/a/{x}", "/b/{x}", false},
		{"/a", "/a/b", false},
	} {
		a, _ := Parse(tc.a)
		b, _ := Parse(tc.b)
		if got := Overlap(a, b); got != tc.overlap {
			t.Errorf("Overlap(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.overlap)
		}
		if Overlap(a, b) != Overlap(b, a) {
			t.Errorf("Overlap is not symmetric for %s, %s", tc.a, tc.b)
		}
	}
	lit, _ := Parse("/pets/mine")
	par, _ := Parse("/pets/{id}")
	if !Less(lit, par) || Less(par, lit) {
		t.Error("a literal segment must sort before a parameter")
	}
}

func TestExpandRoundTrip(t *testing.T) {
	tm, _ := Parse("/Accounts/{Sid}/Calls/{Call}.json")
	v := map[string]string{"Sid": "a/b c%", "Call": "x-y"}
	p, err := tm.Expand(v)
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := Split(p)
	got, ok := tm.Match(segs)
	if !ok || !maps.Equal(got, v) {
		t.Fatalf("Expand then Match: %s → %v, %v", p, got, ok)
	}
	if _, err := tm.Expand(map[string]string{"Sid": "x"}); err == nil {
		t.Fatal("Expand without a value must fail")
	}
}

// FuzzMatch checks, for any template that parses and any path, that a match
// is consistent: the values it yields rebuild a path of the same decoded
// segments.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"/pets/{id}/adoptions", "/pets/A/adoptions"},
		{"/Accounts/{Sid}.json", "/Accounts/a.json.json"},
		{"/range/{a}-{b}", "/range/x-y-z"},
		{"/v1/{name}:cancel", "/v1/a%3Ab:cancel"},
		{"/x/{a}.{b}.{c}", "/x/1.2.3.4"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, tmpl, path string) {
		tm, err := Parse(tmpl)
		if err != nil {
			return
		}
		segs, ok := Split(path)
		if !ok {
			return
		}
		got, ok := tm.Match(segs)
		if !ok {
			return
		}
		if len(got) != len(tm.Params()) {
			t.Fatalf("%s on %s: values %v for params %v", tmpl, path, got, tm.Params())
		}
		again, err := tm.expand(got, true)
		if err != nil {
			t.Fatalf("Expand(%v): %v", got, err)
		}
		segs2, _ := Split(again)
		if !slices.Equal(decodeAll(segs), decodeAll(segs2)) {
			t.Fatalf("%s on %s: values %v rebuild %s", tmpl, path, got, again)
		}
	})
}

func decodeAll(segs []string) []string {
	out := make([]string, len(segs))
	for i, s := range segs {
		out[i] = Decode(s)
	}
	return out
}

// Shape erases the parameters' names and nothing else; templates of one
// shape match the same paths.
func TestShape(t *testing.T) {
	for tmpl, want := range map[string]string{
		"/pets/{id}/adoptions": "/pets/{}/adoptions",
		"/Accounts/{Sid}.json": "/Accounts/{}.json",
		"/range/{a}-{b}":       "/range/{}-{}",
		"/v1/{name}:cancel":    "/v1/{}:cancel",
		"/transfers":           "/transfers",
	} {
		tm, err := Parse(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if got := tm.Shape(); got != want {
			t.Errorf("Shape(%s) = %s, want %s", tmpl, got, want)
		}
	}
	a, _ := Parse("/pets/{id}/x")
	b, _ := Parse("/pets/{petId}/x")
	if a.Shape() != b.Shape() || !Overlap(a, b) || !Overlap(b, a) {
		t.Errorf("renamed parameter: shapes %s and %s", a.Shape(), b.Shape())
	}
}

// RequestPath says a path is one reading for every router exactly when
// net/http's RawPath, if set, is what EscapedPath returns, or Path itself:
// a raw character a URL must escape beside an escape makes EscapedPath
// give RawPath up.
func TestRequestPath(t *testing.T) {
	cases := []struct {
		line, want string
		ok         bool
	}{
		{"/accounts/a1", "/accounts/a1", true},
		{"/accounts/a%2Fb", "/accounts/a%2Fb", true},
		{"/pay/b%61tch", "/pay/b%61tch", true},
		{"/caf%C3%A9", "/caf%C3%A9", true},
		{"/café", "/caf%C3%A9", true},
		{"/accounts/é%2Fa", "/accounts/%C3%A9/a", false},
		{"/a%2F|b", "/a/%7Cb", false},
		{"/a%2F{b}", "/a/%7Bb%7D", false},
		{"/%22%2F`", "/%22/%60", false},
		{"/a|b/é", "/a%7Cb/%C3%A9", true},
		{"/a|b/%C3%A9", "/a%7Cb/%C3%A9", false},
		// gin with UseRawPath reads a "+" in RawPath as a space.
		{"/accounts/é+b", "/accounts/%C3%A9+b", false},
		{"/accounts/a+b%2Fc", "/accounts/a+b%2Fc", false},
		{"/accounts/a+b", "/accounts/a+b", true},
		// chi and echo hand "(%20x" over as written; Go spells it %28%20x.
		{"/accounts/(%20x", "/accounts/(%20x", false},
		{"/accounts/O'Brien%C3%A9", "/accounts/O'Brien%C3%A9", false},
		{"/accounts/O'Brien", "/accounts/O'Brien", true},
		{"/accounts/(a)", "/accounts/(a)", true},
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.line)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := RequestPath(u)
		if got != c.want || ok != c.ok {
			t.Errorf("RequestPath(%q) = %q, %v; want %q, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}
