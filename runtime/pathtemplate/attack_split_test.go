package pathtemplate_test

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/pathtemplate"
)

// A mixed segment can be cut in more places than Match cuts it. Match
// reads "{name}:cancel" as chi does (the parameter ends at the first ":");
// a handler behind ServeMux that splits "{spec}" at the last ":" serves
// "a:b:cancel" as the cancel of "a:b". MatchAnySplit accepts every such
// reading, so that the engine can refuse what it would otherwise pass
// through unprotected; it must accept all Match accepts and nothing a
// split cannot produce.
func TestAttackMatchAnySplit(t *testing.T) {
	cases := []struct {
		tmpl, path string
		strict     bool // Match accepts it
		any        bool // MatchAnySplit accepts it
	}{
		{"/files/{name}:cancel", "/files/a:cancel", true, true},
		{"/files/{name}:cancel", "/files/a:b:cancel", false, true},
		{"/files/{name}:cancel", "/files/a:cancel:x", false, false},
		{"/files/{name}:cancel", "/files/a:b", false, false},
		{"/range/{a}-{b}", "/range/x-y-z", true, true},
		{"/range/{a}-v{b}", "/range/x-y-vz", false, true},
		{"/range/{a}-v{b}", "/range/x-y-z", false, false},
		{"/Accounts/{Sid}.json", "/Accounts/a.b.json", false, true},
		{"/Accounts/{Sid}.json", "/Accounts/a.b.xml", false, false},
		{"/x/{a}.{b}.tar", "/x/1.2.tar", true, true},
		{"/x/{a}.{b}.tar", "/x/1.2.3.tar", false, true},
		{"/x/{a}.{b}.tar", "/x/1.tar", false, false},
		{"/pets/{id}", "/pets/a:b", true, true},
		{"/pets/{id}", "/pets/", false, false},
		{"/pets", "/pets", true, true},
		// A handler cutting "{spec}" itself may take an empty version.
		{"/files/v{version}", "/files/v", false, true},
	}
	for _, tc := range cases {
		tm, err := pathtemplate.Parse(tc.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", tc.tmpl, err)
		}
		segs, _ := pathtemplate.Split(tc.path)
		if _, got := tm.Match(segs); got != tc.strict {
			t.Errorf("%s Match(%s) = %v, want %v", tc.tmpl, tc.path, got, tc.strict)
		}
		if got := tm.MatchAnySplit(segs); got != tc.any {
			t.Errorf("%s MatchAnySplit(%s) = %v, want %v", tc.tmpl, tc.path, got, tc.any)
		}
	}
}

// Every path Match accepts, MatchAnySplit accepts too; a hostile segment
// of many repetitions of the literal is decided quickly (each cut is tried
// once per parameter, not per combination of them).
func TestAttackMatchAnySplitAgreesAndStaysCheap(t *testing.T) {
	tm, err := pathtemplate.Parse("/r/{a}-{b}-{c}-{d}.x")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/r/1-2-3-4.x", "/r/--a-b.x", "/r/a-b-c-d-e.x"} {
		segs, _ := pathtemplate.Split(p)
		if _, ok := tm.Match(segs); ok && !tm.MatchAnySplit(segs) {
			t.Errorf("%s: Match accepts it, MatchAnySplit does not", p)
		}
	}
	hostile := "/r/" + strings.Repeat("-", 4000) + ".y"
	segs, _ := pathtemplate.Split(hostile)
	if tm.MatchAnySplit(segs) {
		t.Fatalf("a segment without the trailing text matched")
	}
}

// MatchRoutedSplit cuts anywhere, as a router matching a regular
// expression does, but never leaves a parameter that ends the path empty,
// which no router does: it accepts what MatchAnySplit accepts but for
// such an empty value.
func TestMatchRoutedSplit(t *testing.T) {
	for _, tc := range []struct {
		tmpl, path string
		want       bool
	}{
		{"/files/{name}:cancel", "/files/a:b:cancel", true},
		{"/files/{name}:cancel", "/files/:cancel", true},
		{"/files/v{version}", "/files/v", false},
		{"/files/v{version}", "/files/vv", true},
		{"/range/{a}-{b}", "/range/1-", false},
		{"/range/{a}-{b}", "/range/1-2-", true},
		{"/range/{a}-{b}/n", "/range/1-/n", true},
		{"/pets/{id}", "/pets/", false},
	} {
		tm, err := pathtemplate.Parse(tc.tmpl)
		if err != nil {
			t.Fatalf("%s: %v", tc.tmpl, err)
		}
		segs, _ := pathtemplate.Split(tc.path)
		if got := tm.MatchRoutedSplit(segs); got != tc.want {
			t.Errorf("%s MatchRoutedSplit(%s) = %v, want %v", tc.tmpl, tc.path, got, tc.want)
		}
		if _, strict := tm.Match(segs); strict && !tm.MatchRoutedSplit(segs) {
			t.Errorf("%s on %s: Match accepts it, MatchRoutedSplit does not", tc.tmpl, tc.path)
		}
	}
}
