package load

import (
	"fmt"
	"strings"
	"testing"
)

// opsSpec is a spec of n annotated operations, POST /op0 … /op{n-1}, each
// with the request body bodyYAML (indented for a request body) and a 201
// answered with the schema respYAML; components holds the rest.
func opsSpec(n int, bodyYAML, respYAML, components string) string {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n")
	for i := range n {
		fmt.Fprintf(&b, "  /op%d:\n    post:\n      operationId: op%d\n      x-idempotency: true\n", i, i)
		if bodyYAML != "" {
			fmt.Fprintf(&b, "      requestBody:\n        content:\n          application/json:\n            schema: %s\n", bodyYAML)
		}
		b.WriteString("      responses:\n        \"201\":\n          description: created\n")
		if respYAML != "" {
			fmt.Fprintf(&b, "          content:\n            application/json:\n              schema: %s\n", respYAML)
		}
	}
	b.WriteString("components:\n  schemas:\n" + components)
	return b.String()
}

// A schema name that does not resolve is said once, at its first $ref,
// with the lines of the others, however many places use it.
func TestDanglingSchemaIsReportedOnce(t *testing.T) {
	src := opsSpec(5, "", "{$ref: '#/components/schemas/Transfer'}", "    Note: {type: string}\n")
	spec, got := loadString(t, src)
	if spec == nil {
		t.Fatalf("a ref nothing needs stopped the load: %q", got)
	}
	wantDiags(t, got, `spec.yaml:13:24: warning: $ref "#/components/schemas/Transfer" does not resolve: #/components/schemas has no member "Transfer"; ignored, since nothing idemgen generates depends on it (used 5 times: here and on lines 23, 33, 43 and 53)`)
}

// Where an operation needs the missing schema, that use is the error, and
// the other uses of the same name get no warning besides: one fix settles
// them all.
func TestDanglingSchemaNeededOnceIsOneError(t *testing.T) {
	src := opsSpec(3, "{$ref: '#/components/schemas/Amount'}", "", "    Note: {type: string}\n")
	src = strings.Replace(src, "x-idempotency: true", "x-idempotency: {fingerprint: [/value]}", 1)
	_, got := loadString(t, src)
	wantDiags(t, got, `spec.yaml:11:22: error: POST /op0 (op0): x-idempotency.fingerprint: $ref "#/components/schemas/Amount" does not resolve: #/components/schemas has no member "Amount"; the fingerprint's /value needs the schema it points at`)
}

// kin-openapi's complaint about a schema that several operations share is
// said once, at the schema that fails by itself (by JSON Pointer and
// line), naming the operations, instead of once per operation at the
// operation with the whole chain of compositions that led to it.
func TestSharedSchemaFaultIsReportedOnceAtTheSchema(t *testing.T) {
	note := `    Note:
      type: object
      properties:
        memo:
          oneOf:
            - type: string
            - anyOf:
                - type: object
                  $recursiveRef: '#'
`
	src := opsSpec(3, "{$ref: '#/components/schemas/Note'}", "", note)
	spec, got := loadString(t, src)
	if spec == nil {
		t.Fatalf("a schema fault stopped the load: %q", got)
	}
	wantDiags(t, got, `spec.yaml:46:19: warning: POST /op0 (op0), POST /op1 (op1), POST /op2 (op2): the schema #/components/schemas/Note/properties/memo/oneOf/1/anyOf/0 does not validate: extra sibling fields: [$recursiveRef]`)

	src = opsSpec(5, "{$ref: '#/components/schemas/Note'}", "", note)
	_, got = loadString(t, src)
	wantDiags(t, got, `spec.yaml:68:19: warning: POST /op0 (op0), POST /op1 (op1), POST /op2 (op2) and 2 more operations: the schema #/components/schemas/Note/properties/memo/oneOf/1/anyOf/0 does not validate: extra sibling fields: [$recursiveRef]`)
}

// A fault in an operation's own inline schema is pointed at by the
// operation's path.
func TestInlineSchemaFaultHasItsPointer(t *testing.T) {
	src := opsSpec(1, "{type: object, properties: {n: {type: integer, required: [a, a]}}}", "", "    Note: {type: string}\n")
	_, got := loadString(t, src)
	wantDiags(t, got, `spec.yaml:11:49: warning: POST /op0 (op0): the schema #/paths/~1op0/post/requestBody/content/application~1json/schema/properties/n does not validate: duplicate field "a" in required`)
}

// A parameter's schema fault is pointed at through the parameter, or
// through the shared parameter its $ref names.
func TestParameterSchemaFaultHasItsPointer(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      x-idempotency: true
      parameters:
        - {name: limit, in: query, schema: {type: integer, required: [x, x]}}
        - $ref: '#/components/parameters/Cursor'
      responses: {"201": {description: created}}
components:
  parameters:
    Cursor:
      name: cursor
      in: query
      schema: {type: string, required: [y, y]}
`
	_, got := loadString(t, src)
	wantDiags(t, got,
		`spec.yaml:9:36: warning: POST /a (a): the schema #/paths/~1a/post/parameters/0/schema does not validate: duplicate field "x" in required`,
		`spec.yaml:17:7: warning: POST /a (a): the schema #/components/parameters/Cursor/schema does not validate: duplicate field "y" in required`,
	)
}
