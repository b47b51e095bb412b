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
	spec, diags := loadString(t, pathSpec("/Accounts/{Sid}.json", "/v1/{name}:cancel", "/range/{a}-{b}", "/pets/{id}"))
	if spec == nil {
		t.Fatalf("diagnostics: %q", diags)
	}
	// Served, but not by net/http's ServeMux: one warning for the spec
	// that names the routers that serve them, at the first such path;
	// /pets/{id} is not among them.
	wantDiags(t, diags, `spec.yaml:7:7: warning: POST /Accounts/{Sid}.json (opa), POST /range/{a}-{b} (opc), POST /v1/{name}:cancel (opb): the path mixes a parameter with text in one segment, which net/http's ServeMux cannot register (its wildcards are whole segments), so Engine.ServeMux refuses the route; serve these operations through chi (runtime/idemchi) or gorilla/mux, or mount Engine.Middleware in front of the router that serves them`)
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

// A path key with a query string cannot be matched by any router, so its
// operation is left out with a warning at the "?" that says how to write
// it; the rest of the spec is generated.
func TestPathWithAQueryStringIsLeftOut(t *testing.T) {
	spec, got := loadString(t, pathSpec("/responses", "/responses?beta=true", "'/batches?mode=async&dry=1'"))
	wantDiags(t, got,
		`spec.yaml:9:13: warning: POST /responses?beta=true (opb): the path has a query string (?beta=true), which no router matches as part of a path, so this operation is left unprotected and the rest is generated. Give it a path of its own, or declare beta as a query parameter of POST /responses and list it in that operation's x-idempotency query, so that its fingerprint tells the requests apart`,
		`spec.yaml:14:12: warning: POST /batches?mode=async&dry=1 (opc): the path has a query string (?mode=async&dry=1), which no router matches as part of a path, so this operation is left unprotected and the rest is generated. Give it a path of its own, or declare dry, mode as query parameters of POST /batches and list them in that operation's x-idempotency query, so that its fingerprint tells the requests apart`,
	)
	if spec == nil || len(spec.Operations) != 1 || spec.Operations[0].Path != "/responses" {
		t.Fatalf("want POST /responses generated alone, got %+v", spec)
	}
}
