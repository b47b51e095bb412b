package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDiagnosticString(t *testing.T) {
	cases := []struct {
		d    Diagnostic
		want string
	}{
		{Diagnostic{Pos: Pos{File: "api/openapi.yaml", Line: 41, Col: 9}, Operation: "POST /transfers (createTransfer)", Field: "x-idempotency.ttl", Message: `"7 days" is not a duration (use 7d, 24h, 90m)`},
			`api/openapi.yaml:41:9: error: POST /transfers (createTransfer): x-idempotency.ttl: "7 days" is not a duration (use 7d, 24h, 90m)`},
		{Diagnostic{Severity: Warning, Pos: Pos{File: "a.yaml", Line: 3, Col: 1}, Message: "defaults apply to nothing"},
			"a.yaml:3:1: warning: defaults apply to nothing"},
		{Diagnostic{Severity: Warning, Pos: Pos{File: "a.yaml"}, Operation: "PATCH /x (x)", Message: "m"},
			"a.yaml: warning: PATCH /x (x): m"},
		{Diagnostic{Pos: Pos{File: "a.yaml", Line: 7}, Field: "x-idempotency", Message: "m"},
			"a.yaml:7: error: x-idempotency: m"},
	}
	for _, c := range cases {
		if got := c.d.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

func TestSortDiagnostics(t *testing.T) {
	ds := []Diagnostic{
		{Pos: Pos{File: "b.yaml", Line: 1, Col: 1}, Message: "z"},
		{Pos: Pos{File: "a.yaml", Line: 10, Col: 1}, Message: "a"},
		{Pos: Pos{File: "a.yaml", Line: 2, Col: 5}, Message: "b"},
		{Pos: Pos{File: "a.yaml", Line: 2, Col: 5}, Message: "a"},
		{Pos: Pos{File: "a.yaml", Line: 2, Col: 3}, Message: "c"},
		{Severity: Warning, Pos: Pos{File: "a.yaml", Line: 1, Col: 1}, Message: "w"},
	}
	SortDiagnostics(ds)
	var got []string
	for _, d := range ds {
		got = append(got, d.String())
	}
	want := []string{"a.yaml:2:3: error: c", "a.yaml:2:5: error: a", "a.yaml:2:5: error: b", "a.yaml:10:1: error: a", "b.yaml:1:1: error: z", "a.yaml:1:1: warning: w"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestHasErrors(t *testing.T) {
	w := Diagnostic{Severity: Warning}
	e := Diagnostic{Severity: Error}
	if HasErrors(nil) || HasErrors([]Diagnostic{w, w}) || !HasErrors([]Diagnostic{w, e}) {
		t.Error("HasErrors is wrong")
	}
	if errs, warns := CountErrors([]Diagnostic{w, e, w}); errs != 1 || warns != 2 {
		t.Errorf("CountErrors = %d, %d", errs, warns)
	}
}
