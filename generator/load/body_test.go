package load

import "testing"

// A content key without a "/" is not a media type: a spec error at the
// key's own line, most often a media type's field indented one level too
// far out, and not a second kind of body for the policy to choose between.
func TestContentKeyThatIsNotAMediaType(t *testing.T) {
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
	wantDiags(t, got, `spec.yaml:12:11: error: POST /transfers (createTransfer): content key "examples" is not a media type (mis-indented?): examples belongs inside a media type, beside its schema`)
	if spec != nil {
		t.Error("a spec with a content key that is not a media type loaded")
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
