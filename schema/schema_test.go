package schema_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/schema"
)

// shapeCases are the golden failures whose errors are all about the shape
// of an x-idempotency value (unknown field, wrong type, bad enum, bad
// duration, size or key source, out-of-range number): in them, a value
// the generator rejects must be rejected by the schema, and a value it
// accepts must validate. The other failures are about the spec around the
// value (a fingerprint pointer the body lacks, lease against ttl), which
// no schema of the value can see.
var shapeCases = []string{
	"fail-bad-duration", "fail-bad-enum", "fail-bad-key-source", "fail-bad-size",
	"fail-document-level", "fail-json-spec", "fail-key-max-length", "fail-unknown-field", "fail-wrong-type",
}

// compile compiles the embedded schema called name and returns the
// schema at pointer in it ("" for the root).
func compile(t *testing.T, name, pointer string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Get(name)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	url := "mem://" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url + "#" + pointer)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return s
}

// value is one x-idempotency value of a spec and the lines it spans.
type value struct {
	doc        bool
	first, end int
	v          any
}

// values returns the document-level and operation-level x-idempotency
// values of a spec, as JSON values.
func values(t *testing.T, src []byte) []value {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Load(src, &doc); err != nil {
		// JSON that YAML cannot read (a lone surrogate escape) is read
		// without lines, which only a case that generates may need.
		return jsonValues(t, src, err)
	}
	root := doc.Content[0]
	var out []value
	add := func(key, v *yaml.Node, isDoc bool) {
		var x any
		if err := v.Decode(&x); err != nil {
			t.Fatal(err)
		}
		// Through JSON, as an editor sees the value.
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		j, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, value{doc: isDoc, first: key.Line, end: lastLine(v), v: j})
	}
	for k, v := range members(root) {
		if k.Value == "x-idempotency" {
			add(k, v, true)
		}
		if k.Value != "paths" {
			continue
		}
		for _, item := range members(v) {
			for _, op := range members(item) {
				for k, v := range members(op) {
					if k.Value == "x-idempotency" {
						add(k, v, false)
					}
				}
			}
		}
	}
	return out
}

// jsonValues returns the x-idempotency values of a JSON spec, without
// their lines.
func jsonValues(t *testing.T, src []byte, yamlErr error) []value {
	t.Helper()
	d, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		t.Fatalf("neither YAML (%v) nor JSON: %v", yamlErr, err)
	}
	root, _ := d.(map[string]any)
	var out []value
	if v, ok := root["x-idempotency"]; ok {
		out = append(out, value{doc: true, v: v})
	}
	paths, _ := root["paths"].(map[string]any)
	for _, item := range paths {
		ops, _ := item.(map[string]any)
		for _, op := range ops {
			o, _ := op.(map[string]any)
			if v, ok := o["x-idempotency"]; ok {
				out = append(out, value{v: v})
			}
		}
	}
	return out
}

// members yields the key and value nodes of a mapping.
func members(m *yaml.Node) func(func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		if m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !yield(m.Content[i], m.Content[i+1]) {
				return
			}
		}
	}
}

func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

// diagnosticLine matches a diagnostic of the generator at a line of the
// spec, capturing the line and the message.
var diagnosticLine = regexp.MustCompile(`(?m)^spec\.(?:yaml|json):(\d+):\d+: (.*)$`)

// errorLines returns the spec lines of the golden case's errors; a case
// without stderr.txt generates.
func errorLines(t *testing.T, dir string) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "stderr.txt"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, m := range diagnosticLine.FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[2], "warning: ") {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, n)
	}
	return lines
}

// TestGoldens checks the schema against the generator's golden cases: in
// every case that generates, each x-idempotency value validates; in every
// shape failure, a value validates exactly when the generator reports no
// error inside it.
func TestGoldens(t *testing.T) {
	op := compile(t, "x-idempotency", "")
	doc := compile(t, "x-idempotency", "/$defs/document")
	dirs, err := filepath.Glob(filepath.Join("..", "testdata", "golden", "*", "spec.*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases (%v)", err)
	}
	checked := map[string]int{}
	for _, file := range dirs {
		dir := filepath.Dir(file)
		name := filepath.Base(dir)
		errs := errorLines(t, dir)
		shape := false
		for _, c := range shapeCases {
			shape = shape || c == name
		}
		if len(errs) > 0 && !shape {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range values(t, src) {
			s := op
			if v.doc {
				s = doc
			}
			rejected := false
			for _, l := range errs {
				rejected = rejected || (l >= v.first && l <= v.end)
			}
			err := s.Validate(v.v)
			switch {
			case rejected && err == nil:
				t.Errorf("%s:%d: the generator rejects this x-idempotency, the schema accepts it", name, v.first)
			case !rejected && err != nil:
				t.Errorf("%s:%d: the generator accepts this x-idempotency, the schema rejects it: %v", name, v.first, err)
			}
			checked[map[bool]string{true: "rejected", false: "accepted"}[rejected]]++
		}
	}
	// Every shape case must have been found, or a renamed case would make
	// the test pass on nothing.
	for _, c := range shapeCases {
		if _, err := os.Stat(filepath.Join("..", "testdata", "golden", c)); err != nil {
			t.Errorf("shape case %s: %v", c, err)
		}
	}
	if checked["rejected"] < len(shapeCases) || checked["accepted"] < 20 {
		t.Errorf("checked %v: too few values", checked)
	}
	t.Logf("x-idempotency values checked: %v", checked)
}

// TestGetCopies checks that a caller cannot change the embedded schema.
func TestGetCopies(t *testing.T) {
	for _, name := range schema.Names() {
		a := schema.Get(name)
		if len(a) == 0 || !json.Valid(a) {
			t.Fatalf("%s: not a JSON document", name)
		}
		a[0] = 'x'
		if schema.Get(name)[0] != '{' {
			t.Errorf("%s: changing a copy changed the schema", name)
		}
	}
	if schema.Get("nope") != nil {
		t.Error("Get of an unknown name returned a schema")
	}
}

// TestOpenAPIDocumentSchema checks the editor's schema, which applies the
// x-idempotency schema to a whole spec: every golden spec that generates
// validates, and every shape failure is rejected.
func TestOpenAPIDocumentSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	for _, name := range []string{"x-idempotency", "openapi"} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema.Get(name)))
		if err != nil {
			t.Fatal(err)
		}
		// The openapi schema refers to its sibling by a relative URL.
		file := map[string]string{"x-idempotency": "x-idempotency.schema.json", "openapi": "openapi-x-idempotency.schema.json"}[name]
		if err := c.AddResource("https://github.com/idemgen/idemgen/schema/"+file, doc); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Compile("https://github.com/idemgen/idemgen/schema/openapi-x-idempotency.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := filepath.Glob(filepath.Join("..", "testdata", "golden", "*", "spec.*"))
	counts := map[string]int{}
	for _, file := range specs {
		name := filepath.Base(filepath.Dir(file))
		shape := slices.Contains(shapeCases, name)
		if (len(errorLines(t, filepath.Dir(file))) > 0 && !shape) || name == "json-surrogates" {
			// json-surrogates is JSON that YAML parsers refuse; the
			// generator reads it, and TestGoldens covers its values.
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := yaml.Unmarshal(src, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		err = s.Validate(inst)
		switch {
		case shape && err == nil:
			t.Errorf("%s: a spec the generator refuses for the shape of x-idempotency validates", name)
		case !shape && err != nil:
			t.Errorf("%s: a spec the generator accepts is rejected: %v", name, err)
		}
		counts[map[bool]string{true: "rejected", false: "accepted"}[shape]]++
	}
	if counts["rejected"] != len(shapeCases) || counts["accepted"] < 20 {
		t.Errorf("checked %v: the golden cases were not all found", counts)
	}
}
