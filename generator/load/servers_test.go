package load

import (
	"context"
	"strings"
	"testing"
)

// A spec served below a prefix (Adyen's /v71) gives its protected
// operations that prefix: without it the engine would take a request to
// /v71/payments for a path it does not know and let it through.
func TestBasePathFromServers(t *testing.T) {
	spec, diags, err := Load(context.Background(), "testdata/adyen-checkout.json", Options{DisplayName: "adyen-checkout.json"})
	if err != nil {
		t.Fatal(err)
	}
	if spec == nil {
		t.Fatalf("diagnostics: %v", diags)
	}
	if spec.BasePath != "/v71" {
		t.Errorf("BasePath = %q, want /v71", spec.BasePath)
	}
}

func TestBasePathCases(t *testing.T) {
	cases := []struct {
		name, doc, op, override string
		want                    string
		diag                    string
	}{
		{"none", "", "", "", "", ""},
		{"root", "servers: [{url: 'https://api.example.com/'}]", "", "", "", ""},
		{"one path", "servers: [{url: 'https://api.example.com/v1/'}, {url: 'https://sandbox.example.com/v1'}]", "", "", "/v1", ""},
		{"relative", "servers: [{url: /api/v2}]", "", "", "/api/v2", ""},
		{"variable default", "servers: [{url: 'https://{region}.example.com/{version}', variables: {region: {default: eu, enum: [eu, us]}, version: {default: v3}}}]", "", "", "/v3", ""},
		{"operation's own servers", "servers: [{url: 'https://api.example.com'}]", "servers: [{url: 'https://api.example.com/v2'}]", "", "/v2", ""},
		{"override", "servers: [{url: 'https://api.example.com/v1'}]", "", "/", "", ""},
		{"override names one", "servers: [{url: 'https://api.example.com/v1'}, {url: 'http://localhost:8080'}]", "", "/v1", "/v1", ""},
		{"two paths", "servers: [{url: 'https://api.example.com/v1'}, {url: 'http://localhost:8080'}]", "", "", "",
			"error: the servers put /v1 (line 3) and / (line 3) before the paths"},
		{"path variable with values", "servers: [{url: 'https://api.example.com/{version}', variables: {version: {default: v1, enum: [v1, v2]}}}]", "", "", "",
			"error: the server URL https://api.example.com/{version} has the variable version in its path, with 2 values"},
		{"relative to the spec", "servers: [{url: api}]", "", "", "", "error: the server URL api is relative to wherever the spec is served"},
		{"scheme variable before a path variable with values", "servers: [{url: '{scheme}://api.example.com/{version}', variables: {scheme: {default: https, enum: [https, http]}, version: {default: v1, enum: [v1, v2]}}}]", "", "", "",
			"error: the server URL {scheme}://api.example.com/{version} has the variable version in its path, with 2 values"},
		{"scheme and host variables", "servers: [{url: '{scheme}://{host}', variables: {scheme: {default: https, enum: [https, http]}, host: {default: api.example.com}}}]", "", "", "", ""},
		{"host variable that holds the path", "servers: [{url: 'https://api.example.com{basePath}', variables: {basePath: {default: /v1, enum: [/v1, /v2]}}}]", "", "", "",
			"error: the server URL https://api.example.com{basePath} has the variable basePath, with 2 values, one of them empty or holding one of : / ? #"},
		{"host variable with a port among its values", "servers: [{url: 'https://{host}/v1', variables: {host: {default: api.example.com, enum: [api.example.com, 'localhost:8080']}}}]", "", "", "/v1", ""},
		{"host variable that may be empty after no scheme", "servers: [{url: '//{host}/v1', variables: {host: {default: api.example.com, enum: [api.example.com, '']}}}]", "", "", "",
			"error: the server URL //{host}/v1 has the variable host, with 2 values, one of them empty"},
		{"host variable of one value that holds the path", "servers: [{url: 'https://api.example.com{basePath}', variables: {basePath: {default: /v1}}}]", "", "", "/v1", ""},
		{"query variable with values", "servers: [{url: 'https://api.example.com/v1?tenant={t}', variables: {t: {default: a, enum: [a, /b]}}}]", "", "", "/v1", ""},
		{"variable not declared", "servers: [{url: 'https://api.example.com/{version}'}]", "", "", "",
			"error: the server URL https://api.example.com/{version} names the variable version, which its variables do not declare"},
		{"variable without a default", "servers: [{url: 'https://api.example.com/{version}', variables: {version: {enum: [v1]}}}]", "", "", "",
			"error: the server URL https://api.example.com/{version} has the variable version without a default"},
		{"stray brace", "servers: [{url: 'https://api.example.com/{version'}]", "", "", "", "error: the server URL https://api.example.com/{version has a brace that opens or closes no {variable}"},
		{"dot segment", "servers: [{url: 'https://api.example.com/v1/../v2'}]", "", "", "", "error: the server URL https://api.example.com/v1/../v2 has the path /v1/../v2, with an empty, . or .. segment"},
		{"encoded dot segment", "servers: [{url: 'https://api.example.com/%2e/v2'}]", "", "", "", "with an empty, . or .. segment"},
		{"empty segment", "servers: [{url: 'https://api.example.com/v1//v2'}]", "", "", "", "with an empty, . or .. segment"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opServers := ""
			if c.op != "" {
				opServers = "      " + c.op + "\n"
			}
			src := "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\n" + c.doc + `
paths:
  /x:
    post:
      operationId: x
      x-idempotency: true
` + opServers + `      responses:
        "200": {description: ok}
`
			spec, diags, err := LoadData(context.Background(), []byte(src), "spec.yaml", Options{BasePath: c.override})
			if err != nil {
				t.Fatal(err)
			}
			if c.diag != "" {
				if spec != nil || len(diags) != 1 || !strings.Contains(diags[0].String(), c.diag) {
					t.Fatalf("diagnostics %v, want one error containing %q", diags, c.diag)
				}
				return
			}
			if spec == nil || len(diags) != 0 {
				t.Fatalf("diagnostics: %v", diags)
			}
			if spec.BasePath != c.want {
				t.Errorf("BasePath = %q, want %q", spec.BasePath, c.want)
			}
		})
	}
}
