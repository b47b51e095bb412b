package load

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/generator/model"
)

// TestUnprotectedRoutes: the operations without a policy that the engine
// must pass through are the more specific ones of a protected template's
// method and length, a path item reached through $ref among them;
// another method, another length or a less specific path is left out.
func TestUnprotectedRoutes(t *testing.T) {
	spec, diags := loadString(t, `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /pay/{id}:
    post:
      operationId: capture
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      x-idempotency: true
      responses: {"200": {description: ok}}
    patch:
      operationId: amend
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
  /pay/batch: {$ref: "#/components/pathItems/Batch"}
  /pay/refund:
    post:
      x-idempotency: false
      responses: {"200": {description: ok}}
    get:
      operationId: listRefunds
      responses: {"200": {description: ok}}
  /pay/{id}/receipt:
    post:
      operationId: receipt
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
components:
  pathItems:
    Batch:
      post:
        operationId: batch
        responses: {"200": {description: ok}}
`)
	if len(diags) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	want := []model.Route{{Method: "POST", Path: "/pay/batch", ID: "batch"}, {Method: "POST", Path: "/pay/refund"}}
	if diff := cmp.Diff(want, spec.Unprotected); diff != "" {
		t.Errorf("Unprotected (-want +got):\n%s", diff)
	}
}
