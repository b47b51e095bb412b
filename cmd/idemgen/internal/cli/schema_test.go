package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	yaml "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/generator/gocode"
	"github.com/idemgen/idemgen/generator/sqlgen"
	"github.com/idemgen/idemgen/schema"
)

func TestSchemaCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{{nil, "x-idempotency"}, {[]string{"x-idempotency"}, "x-idempotency"}, {[]string{"config"}, "config"}, {[]string{"openapi"}, "openapi"}} {
		var out, errOut bytes.Buffer
		if code := Run(append([]string{"schema"}, c.args...), nil, &out, &errOut); code != exitOK {
			t.Fatalf("schema %v: exit %d: %s", c.args, code, errOut.String())
		}
		if !bytes.Equal(out.Bytes(), schema.Get(c.want)) {
			t.Errorf("schema %v did not print the %s schema", c.args, c.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := Run([]string{"schema", "swagger"}, nil, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "x-idempotency or config or openapi") {
		t.Errorf("schema swagger: exit %d, %q", code, errOut.String())
	}
}

// configSchema is the config schema, compiled, and its top-level
// properties.
func configSchema(t *testing.T) (*jsonschema.Schema, map[string]map[string]any) {
	t.Helper()
	raw := schema.Get("config")
	var parsed struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(raw, &parsed); err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://idemgen.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://idemgen.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s, parsed.Properties
}

// The schema knows the keys the config reader knows, and the values of
// its enums are the generator's.
func TestConfigSchemaMatchesReader(t *testing.T) {
	_, props := configSchema(t)
	var inSchema []string
	for k := range props {
		inSchema = append(inSchema, k)
	}
	keys := configKeys()
	slices.Sort(inSchema)
	slices.Sort(keys)
	if !slices.Equal(inSchema, keys) {
		t.Errorf("schema keys %v, config reader's %v", inSchema, keys)
	}
	for key, want := range map[string][]string{"layout": sqlgen.Layouts, "store": gocode.Stores} {
		var got []string
		for _, v := range props[key]["enum"].([]any) {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: schema enum %v, generator's %v", key, got, want)
		}
	}
}

// Every config the reader accepts validates, and every one it refuses for
// its shape is rejected.
func TestConfigSchemaAgreesWithReader(t *testing.T) {
	s, _ := configSchema(t)
	example, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "examples", "petstore-payments", "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		string(example),
		"version: 1\nspec: a.yaml\nout: api\npackage: api\ndialect: postgres,sqlite\nmigrationVersion: 0042\n",
		"version: 1\nacceptBreaking: createTransfer:scope-changed\nlayout: goose\nstore: sqlite\naugmentedSpec: x.yaml\n",
		"spec: a.yaml\n",
		"version: 2\n",
		"version: 1\nspecs: a.yaml\n",
		"version: 1\nout: [api]\n",
		"version: 1\ndialect: {postgres: true}\n",
	} {
		_, readErr := decodeConfig("idemgen.yaml", []byte(c))
		var v any
		if err := yaml.Unmarshal([]byte(c), &v); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		j, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		schemaErr := s.Validate(j)
		if (readErr == nil) != (schemaErr == nil) {
			t.Errorf("config\n%s: reader says %v, schema says %v", c, readErr, schemaErr)
		}
	}
}
