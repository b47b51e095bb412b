package model

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Write prints errors before warnings whatever their order and lines, and
// ends with one summary line; the warnings mode hides warnings or their
// count, never an error.
func TestReportWrite(t *testing.T) {
	rep := Report{
		Source:     "api.yaml",
		Operations: 3,
		Diagnostics: []Diagnostic{
			{Severity: Warning, Pos: Pos{File: "api.yaml", Line: 2, Col: 1}, Message: "w1"},
			{Severity: Error, Pos: Pos{File: "api.yaml", Line: 9, Col: 1}, Message: "e1"},
			{Severity: Warning, Pos: Pos{File: "api.yaml", Line: 1, Col: 1}, Message: "w2"},
		},
	}
	for _, tc := range []struct {
		show Warnings
		want string
	}{
		{WarningsAll, "api.yaml:9:1: error: e1\napi.yaml:1:1: warning: w2\napi.yaml:2:1: warning: w1\n1 error, 2 warnings in 3 operations of api.yaml\n"},
		{WarningsSummary, "api.yaml:9:1: error: e1\n1 error, 2 warnings (not shown) in 3 operations of api.yaml\n"},
		{WarningsOff, "api.yaml:9:1: error: e1\n1 error in 3 operations of api.yaml\n"},
	} {
		var b strings.Builder
		if err := rep.Write(&b, tc.show); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, b.String()); diff != "" {
			t.Errorf("--warnings=%s (-want +got):\n%s", tc.show, diff)
		}
	}
	var b strings.Builder
	if err := (Report{Source: "ok.yaml", Operations: 1}).Write(&b, WarningsAll); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "0 errors, 0 warnings in 1 operation of ok.yaml\n" {
		t.Errorf("a clean report prints %q", got)
	}
}

func TestParseWarnings(t *testing.T) {
	for _, s := range []string{"all", "summary", "off"} {
		w, err := ParseWarnings(s)
		if err != nil || w.String() != s {
			t.Errorf("ParseWarnings(%q) = %v, %v", s, w, err)
		}
	}
	if _, err := ParseWarnings("none"); err == nil {
		t.Error("ParseWarnings accepted none")
	}
}
