package load

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator/model"
)

// mutualSpec is a spec of n component schemas S0 … S(n-1) with ops
// annotated operations whose body is the last of them. S0 declares the body
// key and the fingerprinted /amount. Each other schema names every earlier
// one through shape: "allOf", "oneOf", "anyOf", "properties", "items", or
// "mixed", which takes the five in turn; "chain" names only the one before,
// through allOf. With "+amount" each also declares its own /amount, the
// schema before it, so that the lookup of /amount meets every schema.
func mutualSpec(n, ops int, shape string) []byte {
	var b strings.Builder
	b.WriteString("openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n")
	for i := range ops {
		fmt.Fprintf(&b, `  /x%d:
    post:
      operationId: x%d
      x-idempotency: {key: body:/rid, fingerprint: [/amount]}
      requestBody:
        content:
          application/json:
            schema: {$ref: '#/components/schemas/S%d'}
      responses: {"200": {description: ok}}
`, i, i, n-1)
	}
	b.WriteString(`components:
  schemas:
    S0: {type: object, properties: {rid: {type: string, maxLength: 40}, amount: {type: integer}}}
`)
	amount := strings.HasSuffix(shape, "+amount")
	shape = strings.TrimSuffix(shape, "+amount")
	shapes := []string{"allOf", "oneOf", "anyOf", "properties", "items"}
	for i := 1; i < n; i++ {
		groups := map[string][]int{}
		for j := range i {
			switch shape {
			case "mixed":
				groups[shapes[(i+j)%len(shapes)]] = append(groups[shapes[(i+j)%len(shapes)]], j)
			case "chain":
				groups["allOf"] = []int{i - 1}
			default:
				groups[shape] = append(groups[shape], j)
			}
		}
		fmt.Fprintf(&b, "    S%d:\n", i)
		for _, g := range []string{"allOf", "oneOf", "anyOf"} {
			if len(groups[g]) > 0 {
				fmt.Fprintf(&b, "      %s:\n", g)
			}
			for _, j := range groups[g] {
				fmt.Fprintf(&b, "        - $ref: '#/components/schemas/S%d'\n", j)
			}
		}
		if !amount && len(groups["properties"])+len(groups["items"]) == 0 {
			continue
		}
		b.WriteString("      type: object\n      properties:\n")
		if amount {
			fmt.Fprintf(&b, "        amount: {$ref: '#/components/schemas/S%d'}\n", i-1)
		}
		for _, j := range groups["properties"] {
			fmt.Fprintf(&b, "        p%d: {$ref: '#/components/schemas/S%d'}\n", j, j)
		}
		for _, j := range groups["items"] {
			fmt.Fprintf(&b, "        a%d: {type: array, items: {$ref: '#/components/schemas/S%d'}}\n", j, j)
		}
	}
	return []byte(b.String())
}

// What one operation's lookup works out inside a composition cycle must
// not change what another operation gets. Here A is a string (its only
// member B is one), but seen from B, where A is reached while B is being
// typed, A has nothing to go by; whichever operation is looked at first,
// the other's field keeps its own type.
func TestCycleFactsDoNotDependOnOrder(t *testing.T) {
	op := func(path, schema string) string {
		return `  /` + path + `:
    post:
      operationId: ` + path + `
      x-idempotency: {fingerprint: [/v]}
      requestBody:
        content:
          application/json:
            schema: {type: object, properties: {v: {$ref: '#/components/schemas/` + schema + `'}}}
      responses: {"200": {description: ok}}
`
	}
	const components = `components:
  schemas:
    A: {allOf: [{$ref: '#/components/schemas/B'}]}
    B: {allOf: [{$ref: '#/components/schemas/A'}, {type: string}]}
`
	head := "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n"
	for order, paths := range map[string]string{"/a first": op("a", "A") + op("b", "B"), "/b first": op("b", "B") + op("a", "A")} {
		spec, diags := loadString(t, head+paths+components)
		if spec == nil {
			t.Fatalf("%s: %v", order, diags)
		}
		for _, o := range spec.Operations {
			if f := o.Policy.Fingerprint; len(f) != 1 || f[0].Type != model.TypeString {
				t.Errorf("%s: %s's /v is %v, want a string", order, o.Path, f)
			}
		}
	}
}

// BenchmarkLoadManySchemas loads specs of 150 and of 1,500 schemas in the
// same run and reports both times and their ratio beside the ratio of the
// references: a load whose cost grows with the references has the two
// ratios close. A chain's references grow ten times; those of schemas
// that each name every earlier one, a hundred times.
func BenchmarkLoadManySchemas(b *testing.B) {
	for _, shape := range []string{"chain+amount", "allOf+amount"} {
		b.Run(shape, func(b *testing.B) {
			small, large := mutualSpec(150, 1, shape), mutualSpec(1500, 1, shape)
			var tSmall, tLarge time.Duration
			for b.Loop() {
				tSmall += timeLoad(b, small)
				tLarge += timeLoad(b, large)
			}
			n := float64(b.N)
			b.ReportMetric(tSmall.Seconds()/n, "s/load-150")
			b.ReportMetric(tLarge.Seconds()/n, "s/load-1500")
			b.ReportMetric(float64(tLarge)/float64(tSmall), "time-ratio")
			b.ReportMetric(float64(strings.Count(string(large), "$ref"))/float64(strings.Count(string(small), "$ref")), "refs-ratio")
		})
	}
}

func timeLoad(b *testing.B, spec []byte) time.Duration {
	start := time.Now()
	if _, _, err := LoadData(context.Background(), spec, "spec.yaml", Options{}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
