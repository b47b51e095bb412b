package load

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// A spec is untrusted input, and schemas shared through $ref make a graph
// whose paths multiply: each of these 64 schemas names the one below it
// twice, so a walk that follows every path takes 2^64 steps. The type of a
// key or fingerprint field must be found without such a walk, so that the
// generator finishes on a spec of a few kilobytes.
func TestSharedSchemasAreTypedOnce(t *testing.T) {
	const depth = 64
	var b strings.Builder
	b.WriteString(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    post:
      operationId: x
      x-idempotency: {key: body:/rid, fingerprint: [/amount]}
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                rid: {$ref: '#/components/schemas/S64'}
                amount: {$ref: '#/components/schemas/S64'}
      responses: {"200": {description: ok}}
components:
  schemas:
    S0: {type: string, maxLength: 40}
`)
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "    S%d: {oneOf: [{$ref: '#/components/schemas/S%d'}, {$ref: '#/components/schemas/S%d'}]}\n", i, i-1, i-1)
	}
	type loaded struct {
		spec *model.Spec
		err  error
	}
	done := make(chan loaded, 1)
	go func() {
		spec, _, err := LoadData(context.Background(), []byte(b.String()), "spec.yaml", Options{})
		done <- loaded{spec, err}
	}()
	select {
	case l := <-done:
		if l.err != nil || l.spec == nil {
			t.Fatalf("LoadData: %v", l.err)
		}
		p := l.spec.Operations[0].Policy
		if p.KeyMaxLength != 40 || len(p.Fingerprint) != 1 || p.Fingerprint[0].Type != model.TypeString {
			t.Errorf("keyMaxLength %d, fingerprint %+v; want 40 and /amount a string", p.KeyMaxLength, p.Fingerprint)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("loading a spec of shared schemas did not finish in 10s")
	}
}
