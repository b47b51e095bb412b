package load

import "testing"

// A content key without a "/" is not a media type. One that carries no
// schema (most often a media type's field indented one level too far out,
// as Plaid's published spec has it) describes no body: a warning at the
// key's own line, the key ignored, and the operation still generated and
// protected.
func TestContentKeyThatIsNotAMediaTypeAndHasNoSchema(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /transfers:
    post:
      operationId: createTransfer
      x-idempotency: true
      requestBody:
        content:
          application/json:
            schema: {type: object}
          examples: {}
      responses: {"201": {description: created}}
`
	spec, got := loadString(t, src)
	wantDiags(t, got, `spec.yaml:12:11: warning: POST /transfers (createTransfer): content key "examples" is not a media type, and it carries no schema, so it is ignored (mis-indented?): examples belongs inside a media type, beside its schema`)
	if spec == nil || len(spec.Operations) != 1 {
		t.Fatal("a spec whose only slip is an empty content key did not load its operation")
	}
}

// A content key that is not a media type but carries a schema was meant
// as a body: which one is a guess that would change what the fingerprint
// reads, so it stays an error.
func TestContentKeyThatIsNotAMediaTypeButHasASchema(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /transfers:
    post:
      operationId: createTransfer
      x-idempotency: true
      requestBody:
        content:
          application/json:
            schema: {type: object}
          examples: {schema: {type: object}}
      responses: {"201": {description: created}}
`
	spec, got := loadString(t, src)
	wantDiags(t, got, `spec.yaml:12:11: error: POST /transfers (createTransfer): content key "examples" is not a media type (mis-indented?): examples belongs inside a media type, beside its schema`)
	if spec != nil {
		t.Error("a spec with a content key that is not a media type but has a schema loaded")
	}
}

// The same through a shared request body: one error at the key, naming
// the operations that use it; a key that is no field of a media type
// gets the general hint.
func TestContentKeyThatIsNotAMediaTypeInASharedBody(t *testing.T) {
	src := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      x-idempotency: true
      requestBody: {$ref: '#/components/requestBodies/Note'}
      responses: {"201": {description: created}}
  /b:
    post:
      operationId: b
      x-idempotency: true
      requestBody: {$ref: '#/components/requestBodies/Note'}
      responses: {"201": {description: created}}
components:
  requestBodies:
    Note:
      content:
        json:
          schema: {type: object}
`
	_, got := loadString(t, src)
	wantDiags(t, got, `spec.yaml:20:9: error: POST /a (a), POST /b (b): content key "json" is not a media type (mis-indented?): a media type has a / in it, as application/json has`)
}
