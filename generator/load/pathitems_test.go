package load

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// A path item's $refs are followed to the path item that holds its
// operations, however many there are; one that cannot be followed is an
// error at the $ref that makes it so, never a path whose operations are
// passed over.
func TestPathItemRefs(t *testing.T) {
	const head = "openapi: 3.1.0\ninfo: {title: t, version: \"1\"}\npaths:\n  /pay:\n"
	const pay = `    Pay:
      post:
        operationId: pay
        x-idempotency: true
        responses: {"200": {description: ok}}
`
	for _, c := range []struct {
		name, spec, err string
	}{
		{"chain", "    $ref: '#/components/pathItems/A'\ncomponents:\n  pathItems:\n    A: {$ref: '#/components/pathItems/B', summary: s}\n    B: {$ref: '#/components/pathItems/Pay', description: d, x-note: n}\n" + pay, ""},
		{"escaped", "    $ref: '#/components/pathItems/A'\ncomponents:\n  pathItems:\n    A: {$ref: '#/components/pathItems/Pay%2520~1'}\n" + strings.Replace(pay, "Pay:", "Pay%20/:", 1), ""},
		{"cycle", "    $ref: '#/components/pathItems/A'\ncomponents:\n  pathItems:\n    A: {$ref: '#/components/pathItems/B'}\n    B: {$ref: '#/components/pathItems/A'}\n" + pay,
			"spec.yaml:9:9: error: the path item of /pay is $ref \"#/components/pathItems/A\", which leads back to a path item the $refs before it named"},
		{"itself", "    $ref: '#/paths/~1pay'\n",
			"spec.yaml:5:5: error: the path item of /pay is $ref \"#/paths/~1pay\", which leads back"},
		{"parameters beside", "    $ref: '#/components/pathItems/Pay'\n    parameters: []\ncomponents:\n  pathItems:\n" + pay,
			"spec.yaml:6:5: error: the path item of /pay has both a $ref and its own parameters"},
		{"extension beside", "    $ref: '#/components/pathItems/Pay'\n    x-idempotency: true\ncomponents:\n  pathItems:\n" + pay,
			"spec.yaml:6:5: error: the path item of /pay has both a $ref and its own x-idempotency"},
		{"nowhere", "    $ref: '#/components/pathItems/Nope'\ncomponents:\n  pathItems:\n" + pay,
			"spec.yaml:5:5: error: the path item of /pay is $ref \"#/components/pathItems/Nope\", which does not resolve"},
		{"not an object", "    $ref: '#/info/title'\n",
			"spec.yaml:5:5: error: the path item of /pay is $ref \"#/info/title\", which names the string \"t\", not a path item"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, diags, err := LoadData(context.Background(), []byte(head+c.spec), "spec.yaml", Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range diags {
				got = append(got, d.String())
			}
			if c.err == "" {
				if spec == nil || len(spec.Operations) != 1 {
					t.Fatalf("POST /pay is not loaded: %q", got)
				}
				want := []string{"components", "pathItems", "Pay"}
				if c.name == "escaped" {
					want[2] = "Pay%20/"
				}
				if op := spec.Operations[0]; op.ID != "pay" || !slices.Equal(op.Item, want) {
					t.Errorf("operation %q at %q, want pay at %q", op.ID, op.Item, want)
				}
				return
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], c.err) {
				t.Errorf("diagnostics %q, want one that starts %q", got, c.err)
			}
		})
	}
}
