package generator

import (
	"regexp"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// basePathOf generates spec and returns the BasePath constant of the Go
// file, "" when there is none, with the diagnostics.
func basePathOf(t *testing.T, spec string) (string, []model.Diagnostic) {
	t.Helper()
	files, diags := generateIn(t, t.TempDir(), spec, Options{})
	m := regexp.MustCompile(`(?m)^const BasePath = "(.*)"$`).FindSubmatch(files["api/idempotency.idem.go"])
	if m == nil {
		return "", diags
	}
	return string(m[1]), diags
}

// serverSpec is a spec with one protected operation served under the
// given servers list.
func serverSpec(servers string) string {
	return `openapi: 3.0.3
info: {title: t, version: "1"}
servers:
` + servers + `
paths:
  /payments:
    post:
      operationId: createPayment
      x-idempotency: true
      responses: {"200": {description: ok}}
`
}

// TestServerPathVariableWithSeveralValuesAfterASchemeVariable: docs/generator.md
// promises that a server path variable with several values is an error
// until the configuration names the prefix, since the engine strips one
// prefix and the other value's requests would pass it unprotected.
// https://api.example.com/{version} is refused, but the same URL with its
// scheme a variable too is not: the variables are replaced one by one and
// the path is looked for at an offset worked out before the first
// replacement, so once {scheme} (8 bytes) became https (5) the path's
// variable is no longer seen there. The default is taken as the base path,
// and every POST /v2/payments is a path the engine does not know.
func TestServerPathVariableWithSeveralValuesAfterASchemeVariable(t *testing.T) {
	plain := serverSpec(`  - url: 'https://api.example.com/{version}'
    variables:
      version: {default: v1, enum: [v1, v2]}`)
	if _, diags := basePathOf(t, plain); !model.HasErrors(diags) {
		t.Fatalf("the plain URL is not refused either: %s", diagText(diags))
	}
	scheme := serverSpec(`  - url: '{scheme}://api.example.com/{version}'
    variables:
      scheme: {default: https, enum: [https, http]}
      version: {default: v1, enum: [v1, v2]}`)
	if base, diags := basePathOf(t, scheme); !model.HasErrors(diags) {
		t.Errorf("the server URL {scheme}://api.example.com/{version} serves the paths under /v1 and /v2, and generate takes %q as the one base path without an error: POST /v2/payments passes the engine unprotected\n%s", base, diagText(diags))
	}
}

// TestServerPathVariableThatIsNotDeclared: a server URL's path names a
// variable that its variables do not declare. No value of it is known, so
// the prefix is unknown, as for a relative URL, which is an error; instead
// the braces are taken literally, the base path becomes /%7Bversion%7D,
// which no request path starts with, and every protected operation passes
// the engine unprotected without a word.
func TestServerPathVariableThatIsNotDeclared(t *testing.T) {
	spec := serverSpec(`  - url: 'https://api.example.com/{version}'`)
	if base, diags := basePathOf(t, spec); !model.HasErrors(diags) {
		t.Errorf("the server URL https://api.example.com/{version} declares no variable version, and generate takes %q as the base path without an error: no request path starts with it, so every POST passes the engine unprotected\n%s", base, diagText(diags))
	}
}

// TestServerPathWithDotSegments: a server URL whose path holds a dot
// segment (https://api.example.com/v1/../v2) names the prefix /v2, as
// every client that resolves the URL (RFC 3986 §5.2.4) sends it. The base
// path is taken as written, /v1/../v2, which no request path starts with
// once resolved, so every protected operation passes the engine
// unprotected without a word.
func TestServerPathWithDotSegments(t *testing.T) {
	for _, url := range []string{"https://api.example.com/v1/../v2", "https://api.example.com/./v2"} {
		base, diags := basePathOf(t, serverSpec("  - url: '"+url+"'"))
		if !model.HasErrors(diags) && base != "/v2" {
			t.Errorf("the server URL %s serves the paths under /v2, and generate takes %q as the base path without an error: the engine strips a prefix no resolved request path has, and every POST passes it unprotected", url, base)
		}
	}
}

// TestServerURLOfSchemeAndHostVariablesDoesNotCrash: '{scheme}://{host}'
// is a common server URL (a scheme and a host, each a variable, no path).
// The loader works out where the path starts once, before it replaces the
// variables, and slices the URL there after each replacement: once
// {scheme} became the shorter https, that offset lies past the URL's end
// and generate and validate crash with "slice bounds out of range".
func TestServerURLOfSchemeAndHostVariablesDoesNotCrash(t *testing.T) {
	spec := serverSpec(`  - url: '{scheme}://{host}'
    variables:
      scheme: {default: https, enum: [https, http]}
      host: {default: api.example.com}`)
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("generate panics on the server URL {scheme}://{host}: %v", r)
		}
	}()
	base, diags := basePathOf(t, spec)
	if model.HasErrors(diags) || base != "" {
		t.Errorf("the server URL {scheme}://{host} puts no prefix before the paths; got base path %q\n%s", base, diagText(diags))
	}
}
