package load

import (
	"slices"
	"strings"
	"testing"
)

// pathSpec is a spec whose protected operations sit at the given paths.
func pathSpec(paths ...string) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n")
	for i, p := range paths {
		b.WriteString("  " + p + ":\n    post:\n      operationId: op" + string(rune('a'+i)) +
			"\n      x-idempotency: true\n      responses: {\"200\": {description: ok}}\n")
	}
	return b.String()
}

func TestPathTemplatesOfEveryForm(t *testing.T) {
	spec, diags := loadString(t, pathSpec("/Accounts/{Sid}.json", "/v1/{name}:cancel", "/range/{a}-{b}"))
	if spec == nil || len(diags) != 0 {
		t.Fatalf("diagnostics: %q", diags)
	}
	got := map[string][]string{}
	for _, op := range spec.Operations {
		got[op.Path] = op.PathParams
	}
	for path, want := range map[string][]string{
		"/Accounts/{Sid}.json": {"Sid"}, "/v1/{name}:cancel": {"name"}, "/range/{a}-{b}": {"a", "b"},
	} {
		if !slices.Equal(got[path], want) {
			t.Errorf("%s: params %q, want %q", path, got[path], want)
		}
	}
}

func TestPathTemplatesTheRuntimeCannotServe(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/responses?beta=true", "spec.yaml:4:13: error: POST /responses?beta=true (opa): path template \"/responses?beta=true\": holds \"?\""},
		{"/range/{a}{b}", "spec.yaml:4:13: error: POST /range/{a}{b} (opa): path template \"/range/{a}{b}\": parameters {a} and {b} touch"},
		{"/pets/{id", "spec.yaml:4:9: error: POST /pets/{id (opa): path template \"/pets/{id\": a { is never closed"},
		{"'/pets/{id}/toys/{id}'", "spec.yaml:4:20: error: POST /pets/{id}/toys/{id} (opa): path template \"/pets/{id}/toys/{id}\": parameter {id} appears twice"},
	} {
		_, diags := loadString(t, pathSpec(tc.path))
		if len(diags) != 1 || !strings.HasPrefix(diags[0], tc.want) {
			t.Errorf("%s: diagnostics %q, want one starting %q", tc.path, diags, tc.want)
		}
	}
}

func TestOverlappingTemplatesAreRefused(t *testing.T) {
	_, diags := loadString(t, pathSpec("/pets/{id}", "/pets/{name}", "/pets/mine"))
	if len(diags) != 1 || !strings.Contains(diags[0], "matches the same requests as POST /pets/{id}") {
		t.Fatalf("diagnostics %q, want one overlap between /pets/{id} and /pets/{name}", diags)
	}
}
