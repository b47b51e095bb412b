package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v4"
)

// sameNodes says where the trees a and b first differ in what the loader
// reads of a node: kind, style, tag, value, line, column and members.
func sameNodes(a, b *yaml.Node, at string) error {
	if a.Kind != b.Kind || a.Style != b.Style || a.Tag != b.Tag || a.Value != b.Value || a.Line != b.Line || a.Column != b.Column {
		return fmt.Errorf("%s: %s against %s", at, describeNode(a), describeNode(b))
	}
	if len(a.Content) != len(b.Content) {
		return fmt.Errorf("%s: %d members against %d", at, len(a.Content), len(b.Content))
	}
	for i := range a.Content {
		if err := sameNodes(a.Content[i], b.Content[i], at+"/"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

func describeNode(n *yaml.Node) string {
	return fmt.Sprintf("kind %d style %d tag %s %q at %d:%d", n.Kind, n.Style, n.Tag, n.Value, n.Line, n.Column)
}

// jsonAndYAMLTrees parses data with the JSON decoder and with the YAML
// parser.
func jsonAndYAMLTrees(t testing.TB, data []byte) (fromJSON, fromYAML *yaml.Node) {
	t.Helper()
	fromJSON, ok := parseJSON(data)
	if !ok {
		t.Fatalf("the JSON decoder refused %.200q", data)
	}
	fromYAML, err := parseYAML(data, "spec.json")
	if err != nil {
		t.Fatal(err)
	}
	return fromJSON, fromYAML
}

// toJSON writes a YAML document's tree as JSON, members in their order,
// indented when indent is set; it does not use the loader.
func toJSON(t testing.TB, n *yaml.Node, indent bool) []byte {
	t.Helper()
	var b bytes.Buffer
	writeJSON(t, &b, n)
	if !indent {
		return b.Bytes()
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func writeJSON(t testing.TB, b *bytes.Buffer, n *yaml.Node) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		open, end := "[", "]"
		if n.Kind == yaml.MappingNode {
			open, end = "{", "}"
		}
		b.WriteString(open)
		for i, c := range n.Content {
			switch {
			case i == 0:
			case n.Kind == yaml.MappingNode && i%2 == 1:
				b.WriteString(":")
			default:
				b.WriteString(",")
			}
			if n.Kind == yaml.MappingNode && i%2 == 0 {
				c = &yaml.Node{Kind: yaml.ScalarNode, Tag: tagStr, Value: c.Value}
			}
			writeJSON(t, b, c)
		}
		b.WriteString(end)
	case yaml.ScalarNode:
		lit := strings.ToLower(n.Value)
		if n.Tag == tagNull {
			lit = "null"
		}
		if n.Tag == tagStr || n.Tag == tagTimestamp || !json.Valid([]byte(lit)) {
			s, err := json.Marshal(n.Value)
			if err != nil {
				t.Fatal(err)
			}
			lit = string(s)
		}
		b.WriteString(lit)
	case yaml.DocumentNode:
		writeJSON(t, b, n.Content[0])
	}
}

// yamlSpecAsJSON reads a YAML spec and returns it as JSON.
func yamlSpecAsJSON(t testing.TB, file string, indent bool) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseYAML(data, file)
	if err != nil {
		t.Fatal(err)
	}
	return toJSON(t, root, indent)
}

// The JSON decoder builds the tree the YAML parser builds from the same
// text, down to each node's line and column.
func TestJSONDecoderMatchesYAMLParser(t *testing.T) {
	docs := map[string]string{
		"empty":        `{}`,
		"nested empty": "{\"a\": {}, \"b\": [], \"c\": [{}, []]}",
		"scalars":      `{"s": "x", "t": true, "f": false, "n": null, "i": 12, "neg": -3, "z": 0, "nz": -0, "f1": 1.5, "e": 2e10, "E": -1.25E-3, "big": 123456789012345678901234567890, "u64": 18446744073709551615, "huge": 1e400, "nzf": -0.0}`,
		"escapes":      `{"e": "a\"b\\c\/d\be\ff\ng\rh\ti", "u": "\u00e9\u4e2d\u0041", "nul": "x\u0000y", "after": "z"}`,
		"wide":         "{\"é\": \"ünïcödé 中文 👍\", \"k\": \"v\", \"x\": [\"é\", 1, \"👍👍\", true]}",
		"wide escaped": "{\"é\\n\": \"ü\\tü\", \"k\": \"v\"}",
		"lines":        "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    \"x\"\n  ],\n\t\"c\": {\"d\": null}\n}\n",
		"crlf":         "{\r\n  \"a\": 1,\r\n  \"b\": [\r\n    2\r\n  ]\r\n}\r\n",
		"lone cr":      "{\r  \"a\": 1,\r  \"b\": \"é\"\r}",
		"spaces":       "  \n {  \"a\" :  1 ,  \"b\"  : [ 1 , 2 ] }  \n\n",
		"bom":          "\uFEFF{\"a\": \"b\", \"c\": 1}",
		"duplicates":   `{"a": 1, "a": 2, "x-idempotency": {"ttl": "1h", "ttl": "2h"}}`,
		"keys":         `{"200": {"description": "ok"}, "": "empty", "true": 1, "null": 2, "1.5": 3}`,
		"yaml words":   `{"a": "yes", "b": "~", "c": "2020-01-02", "d": ".inf", "e": "<<"}`,
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range docs {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			j, y := jsonAndYAMLTrees(t, []byte(docs[name]))
			if err := sameNodes(j, y, ""); err != nil {
				t.Errorf("JSON decoder against YAML parser: %v", err)
			}
		})
	}
}

// Real specs: Adyen's is JSON as published; Stripe's and the pet store's
// are YAML, written out as indented JSON and as one line.
func TestJSONDecoderMatchesYAMLParserOnRealSpecs(t *testing.T) {
	specs := map[string][]byte{}
	if data, err := os.ReadFile(sharedSpec(t, "adyen-CheckoutService-v71.json")); err == nil {
		specs["adyen"] = data
	}
	for _, name := range []string{"oai-petstore-expanded.yaml", "stripe-spec3.yaml"} {
		if testing.Short() && name == "stripe-spec3.yaml" {
			continue
		}
		specs[name+" indented"] = yamlSpecAsJSON(t, sharedSpec(t, name), true)
		specs[name+" on one line"] = yamlSpecAsJSON(t, sharedSpec(t, name), false)
	}
	for name, data := range specs {
		t.Run(name, func(t *testing.T) {
			j, y := jsonAndYAMLTrees(t, data)
			if err := sameNodes(j, y, ""); err != nil {
				t.Errorf("JSON decoder against YAML parser: %v", err)
			}
		})
	}
}

// The JSON decoder leaves to the YAML parser (and its error) what is not
// one JSON object.
func TestJSONDecoderRefuses(t *testing.T) {
	for _, src := range []string{
		``, `[]`, `"x"`, `{`, `{"a": 1,}`, `{"a": 1} {}`, `{"a": 01}`, `{"a": 1.}`, `{"a": .5}`, `{"a": -}`,
		`{"a": 1e}`, `{"a": tru}`, `{a: 1}`, `{"a" 1}`, `{"a": "x` + "\n" + `"}`, `{"a": "\x"}`, `{"a": "\u12"}`,
		"{\"a\": \"\xff\"}", `{"a": [1 2]}`, `{'a': 1}`, "{\"a\": 1} # comment", "openapi: 3.0.3\n",
		strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), // inside an object, one level deeper
	} {
		doc := src
		if strings.HasPrefix(src, "[[") {
			doc = `{"a": ` + src + `}`
		}
		if n, ok := parseJSON([]byte(doc)); ok {
			t.Errorf("parseJSON(%.40q) = %s, want a refusal", doc, describeNode(n))
		}
	}
	deep := `{"a": ` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + `}`
	if _, ok := parseJSON([]byte(deep)); !ok {
		t.Errorf("parseJSON refused %d levels of nesting, which the YAML parser takes", maxJSONDepth)
	}
	if _, err := parseYAML([]byte(deep), "deep.json"); err != nil {
		t.Errorf("the YAML parser refused %d levels of nesting: %v", maxJSONDepth, err)
	}
	if _, err := parseYAML([]byte("["+deep+"]"), "deep.json"); err == nil {
		t.Errorf("the YAML parser took %d levels of nesting", maxJSONDepth+1)
	}
}

// Each failing spec of the golden set, written as JSON, gets the same
// diagnostics, at the same lines and columns, whether the JSON decoder
// or the YAML parser reads it.
func TestJSONDiagnosticsMatchYAMLParser(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "golden", "fail-*", "spec.yaml"))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("found %d failing golden specs (%v)", len(dirs), err)
	}
	for _, file := range dirs {
		if strings.HasPrefix(filepath.Base(filepath.Dir(file)), "fail-emit-") {
			continue // the Go emitter's failures, not the loader's
		}
		for _, indent := range []bool{true, false} {
			name := filepath.Base(filepath.Dir(file)) + map[bool]string{true: " indented", false: " on one line"}[indent]
			t.Run(name, func(t *testing.T) {
				data := yamlSpecAsJSON(t, file, indent)
				j, y := jsonAndYAMLTrees(t, data)
				fromJSON, fromYAML := loadDiagnostics(t, j), loadDiagnostics(t, y)
				if !slices.Equal(fromJSON, fromYAML) {
					t.Errorf("JSON decoder:\n  %s\nYAML parser:\n  %s", strings.Join(fromJSON, "\n  "), strings.Join(fromYAML, "\n  "))
				}
				if len(fromJSON) == 0 {
					t.Error("no diagnostics from a failing spec")
				}
			})
		}
	}
}

// loadDiagnostics loads a parsed spec and returns its diagnostics, or the
// error that stopped it.
func loadDiagnostics(t *testing.T, root *yaml.Node) []string {
	t.Helper()
	tr, err := prepareTree(root, "spec.json")
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	_, diags, err := loadTree(context.Background(), tr, Options{})
	var out []string
	for _, d := range diags {
		out = append(out, d.String())
	}
	if err != nil {
		out = append(out, "error: "+err.Error())
	}
	return out
}

// FuzzJSONDecoder checks the JSON decoder against the YAML parser on any
// JSON object both read: the same tree, positions included. Raw U+0085,
// U+2028 and U+2029 are left out: YAML breaks lines at them, JSON does not.
func FuzzJSONDecoder(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"a": [1, -0, 1.5e3, true, null, "x\ty"]}`, "{\n\t\"é\": {\"b\": \"\\u00e9\"}\r\n}",
		`{"a": "\"\\\/", "b": 18446744073709551616, "c": 1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || bytes.ContainsAny(data, "\u0085\u2028\u2029") || bytes.Contains(data, []byte(`\u`)) {
			return
		}
		j, ok := parseJSON(data)
		y, err := parseYAML(data, "spec.json")
		if !ok || err != nil {
			if ok && bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{")) && !strings.Contains(err.Error(), "depth") {
				t.Skipf("the YAML parser refuses what JSON reads: %v", err)
			}
			return
		}
		if err := sameNodes(j, y, ""); err != nil {
			t.Errorf("%q: %v", data, err)
		}
	})
}
