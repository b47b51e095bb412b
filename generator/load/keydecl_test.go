package load

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/model"
)

// loadFile loads a spec of testdata and returns its one operation's
// policy and the diagnostics as strings.
func loadFile(t *testing.T, name string) (model.Policy, []string) {
	t.Helper()
	spec, diags, err := Load(context.Background(), "testdata/"+name, Options{DisplayName: name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range diags {
		out = append(out, d.String())
	}
	if spec == nil || len(spec.Operations) != 1 {
		t.Fatalf("%s: want one operation; diagnostics %q", name, out)
	}
	return spec.Operations[0].Policy, out
}

// A body key the schema lists as required, in a required body, makes the
// policy require a key unless the extension says otherwise: a request
// without one would otherwise run unprotected, silently.
func TestRequiredBodyKeyIsRequired(t *testing.T) {
	p, diags := loadFile(t, "square-payments.yaml")
	if !p.Required || p.KeyMaxLength != 45 {
		t.Errorf("required %v, keyMaxLength %d; want true and 45 (the schema's)", p.Required, p.KeyMaxLength)
	}
	if len(diags) != 0 {
		t.Errorf("diagnostics: %q", diags)
	}
}

// A key field the spec marks deprecated is one clients may stop sending.
func TestDeprecatedBodyKeyWarns(t *testing.T) {
	p, diags := loadFile(t, "plaid-transfer.yaml")
	if p.Required {
		t.Error("an optional body key made the policy require a key")
	}
	want := "plaid-transfer.yaml:10:9: warning: POST /transfer/create (transferCreate): x-idempotency.key: the spec marks the body field /idempotency_key deprecated, so clients may stop sending it, and a request without a key runs unprotected"
	if len(diags) != 1 || !strings.HasPrefix(diags[0], want) {
		t.Errorf("diagnostics %q, want one starting %q", diags, want)
	}
}

func TestKeyDeclarationsSetRequired(t *testing.T) {
	const header = "- {name: Idempotency-Key, in: header, required: true, schema: {type: string}}"
	cases := []struct {
		name, policy, params, body string
		required                   bool
		diags                      []string
	}{
		{"required header", "{}", header, "", true, nil},
		{"optional header", "{}", "- {name: Idempotency-Key, in: header, schema: {type: string}}", "", false, nil},
		{"required false wins", "{required: false}", header, "", false,
			[]string{"warning: POST /x (x): x-idempotency.required: the spec declares the header parameter Idempotency-Key (line 9) required"}},
		{"document default wins", "true", header, "", false,
			[]string{"warning: POST /x (x): x-idempotency.required: the spec declares the header parameter Idempotency-Key (line 10) required"}},
		{"deprecated header", "{}", "- {name: Idempotency-Key, in: header, deprecated: true, schema: {type: string}}", "", false,
			[]string{"warning: POST /x (x): x-idempotency.key: the spec marks the header parameter Idempotency-Key (line 9) deprecated"}},
		{"body optional", "{key: body:/k}", "", "required: false", false, nil},
		{"nested and required", "{key: body:/meta/k}", "", "required: true", true, nil},
		{"allOf lists it", "{key: body:/a}", "", "required: true", true, nil},
		{"oneOf branch lists it", "{key: body:/b}", "", "required: true", false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := ""
			if c.name == "document default wins" {
				doc = "x-idempotency: {required: false}\n"
			}
			params := ""
			if c.params != "" {
				params = "      parameters:\n        " + c.params + "\n"
			}
			body := ""
			if c.body != "" {
				body = `      requestBody:
        ` + c.body + `
        content:
          application/json:
            schema:
              type: object
              required: [k, meta]
              properties:
                k: {type: string}
                meta: {type: object, required: [k], properties: {k: {type: string}}}
              allOf:
                - {required: [a], properties: {a: {type: string}}}
              oneOf:
                - {required: [b], properties: {b: {type: string}}}
                - {properties: {c: {type: string}}}
`
			}
			src := "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\n" + doc + `paths:
  /x:
    post:
      operationId: x
      x-idempotency: ` + c.policy + "\n" + params + body + `      responses:
        "200": {description: ok}
`
			spec, diags := loadString(t, src)
			if spec == nil {
				t.Fatalf("diagnostics: %q", diags)
			}
			if got := spec.Operations[0].Policy.Required; got != c.required {
				t.Errorf("required = %v, want %v", got, c.required)
			}
			if len(diags) != len(c.diags) {
				t.Fatalf("diagnostics %q, want %q", diags, c.diags)
			}
			for i, d := range diags {
				if !strings.Contains(d, c.diags[i]) {
					t.Errorf("diagnostic %q, want it to contain %q", d, c.diags[i])
				}
			}
		})
	}
}
