package load

import (
	"context"
	"strings"
	"testing"
)

// TestNullObjectsDoNotCrash: YAML lets any object of a spec be written
// with nothing under its key, or as ~. kin-openapi refuses most such
// objects (value MUST be an object) but hands a null Media Type Object
// back as a nil pointer, and a null schema, request body or parameter
// schema as none. Load reads each as an object with nothing declared,
// or reports it, and never crashes.
func TestNullObjectsDoNotCrash(t *testing.T) {
	cases := []struct {
		name, policy, operation, components string
		want                                string // a diagnostic containing it; "" for any that do not crash
	}{
		{"media type, whole body", "true", "requestBody: {content: {application/json: ~}}", "",
			"warning: POST /refunds (createRefund): the application/json request body is null"},
		{"media type written empty, whole body", "true", "requestBody:\n        content:\n          application/json:\n", "",
			"warning: POST /refunds (createRefund): the application/json request body is null"},
		{"media type, fingerprint fields", "{fingerprint: [/a]}", "requestBody: {content: {application/json: ~}}", "",
			"the application/json request body declares no schema"},
		{"media type, body key", "{key: body:/k}", "requestBody: {content: {application/json: ~}}", "",
			"the application/json request body declares no schema"},
		{"form media type", "{fingerprint: [/a]}", "requestBody: {content: {application/x-www-form-urlencoded: ~}}", "",
			"the application/x-www-form-urlencoded request body declares no schema"},
		{"media type among others", "true", "requestBody: {content: {application/json: ~, text/plain: ~}}", "", "also as text/plain"},
		{"schema", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: ~}}}", "",
			"the application/json request body declares no schema"},
		{"request body", "true", "requestBody: ~", "", ""},
		{"request body content", "true", "requestBody: {content: ~}", "", ""},
		{"request body by $ref", "{fingerprint: [/a]}", "requestBody: {$ref: '#/components/requestBodies/B'}", "requestBodies: {B: ~}", "value MUST be an object"},
		{"property", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, properties: {a: ~}}}}}", "", "value MUST be an object"},
		{"nested property", "{fingerprint: [/a/b]}", "requestBody: {content: {application/json: {schema: {type: object, properties: {a: {type: object, properties: {b: ~}}}}}}}", "", "value MUST be an object"},
		{"items", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, properties: {a: {type: array, items: ~}}}}}}", "", ""},
		{"allOf member", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {allOf: [~, {type: object, properties: {a: {type: string}}}]}}}}", "", "value MUST be an object"},
		{"oneOf member", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {oneOf: [~, {type: object, properties: {a: {type: string}}}]}}}}", "", "value MUST be an object"},
		{"anyOf member", "{key: body:/k}", "requestBody: {content: {application/json: {schema: {anyOf: [~, {type: object, properties: {k: {type: string}}}]}}}}", "", "value MUST be an object"},
		{"additionalProperties", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, additionalProperties: ~}}}}", "", ""},
		{"not", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, not: ~, properties: {a: {type: string}}}}}}", "", ""},
		{"component schema by $ref", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {$ref: '#/components/schemas/S'}}}}", "schemas: {S: ~}", "value MUST be an object"},
		{"response", "true", "", "", "value MUST be an object"},
		{"response content", "true", "", "", "warning: POST /refunds (createRefund): responses of type text/event-stream are streamed"},
		{"parameter", "true", "parameters: [~]", "", "value MUST be an object"},
		{"key parameter's schema", "{key: header:X-Key}", "parameters: [{name: X-Key, in: header, schema: ~}]", "", ""},
		{"parameter content", "{key: header:X-Key}", "parameters: [{name: X-Key, in: header, content: {text/plain: ~}}]", "", ""},
		{"encoding", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, properties: {a: {type: string}}}, encoding: {a: ~}}}}", "", ""},
		{"example", "{fingerprint: [/a]}", "requestBody: {content: {application/json: {schema: {type: object, properties: {a: {type: string}}}, examples: {e: ~}}}}", "", "value MUST be an object"},
		{"response header", "true", "", "", "value MUST be an object"},
		{"callback", "true", "callbacks: {cb: ~}", "", "value MUST be an object"},
		{"policy", "~", "", "", "x-idempotency must be true, false or an object, not null"},
		{"component response by $ref", "true", "", "responses: {R: ~}", "value MUST be an object"},
		{"another path item", "true", "", "", ""},
		{"another operation", "true", "", "", ""},
		{"component parameter by $ref", "true", "parameters: [{$ref: '#/components/parameters/P'}]", "parameters: {P: ~}", "value MUST be an object"},
	}
	responses := map[string]string{
		"response":                   "responses: {'201': ~}",
		"component response by $ref": "responses: {'201': {$ref: '#/components/responses/R'}}",
		"another path item":          "responses: {'201': {description: created}}\n  /other: ~",
		"another operation":          "responses: {'201': {description: created}}\n    put: ~\n  /other:\n    post: ~",
		"response content":           "responses: {'201': {description: ok, content: {application/json: ~, text/event-stream: ~}}}",
		"response header":            "responses: {'201': {description: ok, headers: {X-A: ~}}}",
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, ok := responses[c.name]
			if !ok {
				resp = "responses: {'201': {description: created}}"
			}
			comps := ""
			if c.components != "" {
				comps = "components:\n  " + c.components + "\n"
			}
			src := "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n  /refunds:\n    post:\n      operationId: createRefund\n      x-idempotency: " +
				c.policy + "\n      " + c.operation + "\n      " + resp + "\n" + comps
			var diags []string
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("load panics: %v\n%s", r, src)
					}
				}()
				_, ds, err := LoadData(context.Background(), []byte(src), "spec.yaml", Options{})
				if err != nil {
					diags = append(diags, "error: "+err.Error())
				}
				for _, d := range ds {
					diags = append(diags, d.String())
				}
			}()
			all := strings.Join(diags, "\n")
			if c.want != "" && !strings.Contains(all, c.want) {
				t.Errorf("diagnostics:\n%s\nwant one containing %q", all, c.want)
			}
		})
	}
}
