package load

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/runtime/fingerprint"
)

// schemaSpec wraps a request-body schema and a fingerprint list in a
// one-operation spec.
func schemaSpec(mediaType, schema, fingerprint string) string {
	return `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency:
        fingerprint: ` + fingerprint + `
      requestBody:
        content:
          ` + mediaType + `:
            schema:
` + indent(schema, "              ") + `
      responses:
        "200": {description: ok}
components:
  schemas:
    Money:
      type: object
      properties:
        amount: {type: integer}
        currency: {type: string}
    Node:
      type: object
      properties:
        name: {type: string}
        child: {$ref: '#/components/schemas/Node'}
    Looping:
      allOf:
        - $ref: '#/components/schemas/Looping'
`
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func loadString(t *testing.T, src string) (*model.Spec, []string) {
	t.Helper()
	spec, diags, err := LoadData(context.Background(), []byte(src), "spec.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range diags {
		out = append(out, d.String())
	}
	return spec, out
}

func TestFingerprintSchemaWalk(t *testing.T) {
	cases := []struct {
		name, media, schema, fp string
		want                    map[string]model.FieldType
	}{
		{"ref", "application/json", "$ref: '#/components/schemas/Money'", "[/amount, /currency]",
			map[string]model.FieldType{"/amount": model.TypeInteger, "/currency": model.TypeString}},
		{"allOf", "application/json", `
allOf:
  - $ref: '#/components/schemas/Money'
  - type: object
    properties:
      memo: {type: string}`, "[/amount, /memo]",
			map[string]model.FieldType{"/amount": model.TypeInteger, "/memo": model.TypeString}},
		{"nested", "application/json", `
type: object
properties:
  source:
    type: object
    properties:
      card:
        type: object
        properties:
          number: {type: string}
          exp: {type: [integer, "null"]}`, "[/source/card/number, /source/card/exp, /source]",
			map[string]model.FieldType{"/source/card/number": model.TypeString, "/source/card/exp": model.TypeInteger, "/source": model.TypeObject}},
		{"form", "application/x-www-form-urlencoded", `
type: object
properties:
  amount: {type: integer}
  metadata:
    type: object
    additionalProperties: {type: string}`, "[/amount, /metadata/order_id]",
			map[string]model.FieldType{"/amount": model.TypeInteger, "/metadata/order_id": model.TypeString}},
		{"oneOf any branch", "application/json", `
oneOf:
  - type: object
    properties:
      card: {type: string}
  - type: object
    properties:
      iban: {type: string}`, "[/card, /iban]",
			map[string]model.FieldType{"/card": model.TypeString, "/iban": model.TypeString}},
		{"anyOf branches disagree", "application/json", `
anyOf:
  - type: object
    properties:
      amount: {type: integer}
  - type: object
    properties:
      amount: {type: string}`, "[/amount]",
			map[string]model.FieldType{"/amount": model.TypeAny}},
		{"array whole and free-form", "application/json", `
type: object
properties:
  lines:
    type: array
    items: {type: object}
  extra:
    type: object
    additionalProperties: true
  untyped: {}`, "[/lines, /extra/anything/below, /untyped]",
			map[string]model.FieldType{"/lines": model.TypeArray, "/extra/anything/below": model.TypeAny, "/untyped": model.TypeAny}},
		{"recursive", "application/json", "$ref: '#/components/schemas/Node'", "[/child/child/name]",
			map[string]model.FieldType{"/child/child/name": model.TypeString}},
		{"escaped", "application/vnd.api+json", `
type: object
properties:
  a/b: {type: boolean}
  c~d: {type: number}`, "['/a~1b', '/c~0d']",
			map[string]model.FieldType{"/a~1b": model.TypeBoolean, "/c~0d": model.TypeNumber}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, diags := loadString(t, schemaSpec(c.media, c.schema, c.fp))
			if spec == nil {
				t.Fatalf("no spec; diagnostics: %q", diags)
			}
			got := map[string]model.FieldType{}
			for _, f := range spec.Operations[0].Policy.Fingerprint {
				got[f.Pointer] = f.Type
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s\ndiagnostics: %q", diff, diags)
			}
			fields := spec.Operations[0].Policy.Fingerprint
			for i := 1; i < len(fields); i++ {
				if fields[i-1].Pointer >= fields[i].Pointer {
					t.Errorf("fingerprint not sorted: %v", fields)
				}
			}
		})
	}
}

func TestFingerprintSchemaWalkErrors(t *testing.T) {
	cases := []struct {
		name, media, schema, fp, want string
	}{
		{"missing through allOf", "application/json", `
allOf:
  - $ref: '#/components/schemas/Money'`, "[/amout]", "/amout is not in the request body schema (did you mean /amount?)"},
		{"missing nested", "application/json", `
type: object
properties:
  source:
    type: object
    properties:
      card: {type: string}`, "[/source/crd]", `/source has no property "crd" (did you mean /source/card?)`},
		{"into array items", "application/json", `
type: object
properties:
  lines:
    type: array
    items:
      type: object
      properties:
        sku: {type: string}`, "[/lines/0/sku]", "points into the array /lines, which is fingerprinted as one whole value"},
		{"into a whole-array body", "application/json", `
type: array
items: {type: string}`, "[/0]", "points into the array (the whole body)"},
		{"undeclared on closed object", "application/json", `
type: object
properties:
  a: {type: string}
  b: {type: string}`, "[/zzz]", "(properties there: a, b)"},
		{"no properties", "application/json", "type: object", "[/a]", "(no properties are declared there)"},
		{"recursive allOf does not hang", "application/json", "$ref: '#/components/schemas/Looping'", "[/a]", "/a is not in the request body schema"},
		{"other media type", "text/plain", "type: string", "[/a]", "the request body is text/plain only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, diags := loadString(t, schemaSpec(c.media, c.schema, c.fp))
			if spec != nil {
				t.Errorf("got a spec despite the error")
			}
			if len(diags) != 1 || !strings.Contains(diags[0], c.want) {
				t.Errorf("diagnostics %q, want one containing %q", diags, c.want)
			}
		})
	}
}

func TestBodyMediaTypePreference(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      x-idempotency: {mediaType: application/json}
      requestBody:
        content:
          application/x-www-form-urlencoded:
            schema: {type: object}
          application/json; charset=utf-8:
            schema: {type: object}
      responses:
        "200": {description: ok}
  /y:
    post:
      x-idempotency: true
      requestBody:
        content:
          application/x-www-form-urlencoded:
            schema: {type: object}
      responses:
        "200": {description: ok}
  /z:
    post:
      x-idempotency: true
      responses:
        "200": {description: ok}
`
	spec, diags := loadString(t, src)
	if spec == nil {
		t.Fatalf("diagnostics: %q", diags)
	}
	var got []string
	for _, op := range spec.Operations {
		got = append(got, op.Path+" "+op.BodyMediaType)
	}
	want := []string{"/x application/json", "/y application/x-www-form-urlencoded", "/z "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The loader reads as JSON exactly the media types the runtime's
// fingerprint reads as JSON, whatever their top-level type.
func TestJSONMediaTypesAreTheRuntimes(t *testing.T) {
	const media = "text/vnd.example+json"
	if !fingerprint.IsJSON(media) {
		t.Fatalf("the runtime does not read %s as JSON", media)
	}
	spec, diags := loadString(t, schemaSpec(media, "{type: object, properties: {amount: {type: integer}}}", "[/amount]"))
	if spec == nil || len(spec.Operations) != 1 || len(spec.Operations[0].Policy.Fingerprint) != 1 {
		t.Fatalf("a fingerprinted %s body was not loaded as JSON: %v", media, diags)
	}
}
